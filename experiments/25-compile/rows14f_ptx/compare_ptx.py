"""Compares the .entry bodies of two PTX files of gpt_mega_rows.cu (ptx.sh): for each kernel
instance, IDENTICAL or DIFFERENT, the anonymous namespace's per-compile hash and .loc/.file lines
taken out (the names otherwise carry the template arguments, so an instance keeps its name).

    python3 compare_ptx.py before.ptx after.ptx
"""
import re
import sys


def entries(path):
    txt = open(path).read()
    txt = re.sub(r"_GLOBAL__N__[0-9a-f]+_", "_GLOBAL__N__X_", txt)
    txt = re.sub(r"_INTERNAL_[0-9a-f]+_", "_INTERNAL_X_", txt)
    out, cur = {}, None
    for line in txt.split("\n"):
        if re.match(r"\s*\.(loc|file)\b", line):
            continue
        m = re.match(r"\.entry (\S+)\(", line)
        if m:
            cur = m.group(1)
            out[cur] = []
        elif line.startswith(("// .globl", "\t.section", ".func", ".visible")):
            cur = None
        if cur:
            out[cur].append(line)
    return {k: "\n".join(v).rstrip() for k, v in out.items()}


def main():
    a, b = entries(sys.argv[1]), entries(sys.argv[2])
    for name in sorted(set(a) | set(b)):
        m = re.search(r"kernelI(.*?)EEEv|pack_kernel", name)
        short = m.group(0) if m else name
        if name not in b:
            print("only in the first ", short)
        elif name not in a:
            print("only in the second", short)
        else:
            print(short, "IDENTICAL" if a[name] == b[name] else "DIFFERENT", a[name].count("\n") + 1, "lines")


if __name__ == "__main__":
    main()
