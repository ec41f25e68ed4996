"""Compares two nvdisasm listings (nvdisasm -c CUBIN) of gpt_mega_rows.cu function by function:
IDENTICAL, or DIFFERENT with the first differing lines. Taken out before comparing: the anonymous
namespace's per-compile hash in names, the /*addr*/ comments (the code's offsets inside its own
section do not move unless an instruction does), and the branch labels' function numbers
(.L_x_N: numbered across the whole file, so a removed function renumbers every later one), the
internal subroutines' numbers ($__internal_N_$...: likewise) and runs of blanks.

    python3 compare_sass.py before.sass after.sass
"""
import re
import sys


def functions(path):
    txt = open(path).read()
    txt = re.sub(r"_GLOBAL__N__[0-9a-f]+_[0-9a-z_]*?_cu_[0-9a-f]+", "_GLOBAL__N__X", txt)
    out, cur = {}, None
    for line in txt.split("\n"):
        m = re.match(r"\s*\.text\.(\S+):", line)
        if m:
            cur = m.group(1)
            out[cur] = []
            continue
        if line.lstrip().startswith(".section") or line.lstrip().startswith(".headerflags"):
            cur = None
        if cur is None:
            continue
        line = re.sub(r"/\*[0-9a-f]{4,}\*/", "", line)
        line = re.sub(r"\.L_x_\d+", ".L_x_N", line)
        line = re.sub(r"\$__internal_\d+_\$", "$__internal_N_$", line)
        line = " ".join(line.split())
        if line and not line.startswith("//"):  # (the next section's banner)
            out[cur].append(line)
    return out


def main():
    a, b = functions(sys.argv[1]), functions(sys.argv[2])
    for name in sorted(set(a) | set(b)):
        m = re.search(r"kernelI(.*?)EEEv|pack_kernel", name)
        short = m.group(0) if m else name
        if name not in b:
            print("only in the first ", short)
        elif name not in a:
            print("only in the second", short)
        elif a[name] == b[name]:
            print(short, "IDENTICAL", len(a[name]), "lines")
        else:
            diff = [(i, x, y) for i, (x, y) in enumerate(zip(a[name], b[name])) if x != y]
            print(short, "DIFFERENT", len(a[name]), "/", len(b[name]), "lines;", len(diff), "differ; first:")
            for i, x, y in diff[:3]:
                print("   ", i, "|", x, "|", y)


if __name__ == "__main__":
    main()
