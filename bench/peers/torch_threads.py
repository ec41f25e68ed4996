"""How every torch peer in bench/peers runs: n intra-op threads, like the C++ pool's -t, and one
inter-op thread (the peers run one op at a time, and a second pool would only compete)."""


def use_threads(torch, n: int) -> None:
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set by an earlier parallel op: torch allows it once per process
