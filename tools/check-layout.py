#!/usr/bin/env python3
"""Checks the source tree's shape: no file in the libraries over a line limit,
and no function over a length limit.

A brace scanner, not a parser: comments, strings and raw strings are blanked,
then every block opened where only namespaces and classes enclose it and whose
head ends like a function signature counts as a function body (lambdas inside
a function count toward it). Good enough for code in this project's style;
a false alarm names the file and line to look at.
"""
import argparse
import pathlib
import re
import sys

LIBRARIES = ("compiler", "dsl", "runtime", "kernels")
SUFFIXES = (".cpp", ".h")


def blank(text):
    """The text with comments and string literals replaced by spaces
    (newlines kept, so line numbers hold)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif text.startswith('R"', i) and re.match(r'R"([^(\s]*)\(', text[i:]):
            delim = ")" + re.match(r'R"([^(\s]*)\(', text[i:]).group(1) + '"'
            j = text.find(delim, i)
            j = n if j < 0 else j + len(delim)
        elif text[i] in "\"'" and not (text[i] == "'" and i > 0 and text[i - 1].isalnum()):
            j = i + 1
            while j < n and text[j] != text[i] and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j += 1
        else:
            out.append(text[i])
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", text[i:j]))
        i = j
    return "".join(out)


SIGNATURE = re.compile(r"\)\s*(const|override|final|noexcept|mutable|->[^{;]*|:[^;{]*)*\s*$", re.S)


def functions(path):
    """(first line, lines, name) of every function body in the file."""
    text = blank(path.read_text())
    scopes, line, head_start, found = [], 1, 0, []
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c == "{":
            head = text[head_start:i].split(";")[-1].split("}")[-1]
            kind = "block"
            if re.search(r"\bnamespace\b|\bextern\s*$", head):
                kind = "scope"
            elif re.search(r"\b(class|struct|union|enum)\b[^()]*$", head):
                kind = "scope"
            elif all(k == "scope" for k, _, _ in scopes) and SIGNATURE.search(head):
                kind = "function"
            name = ""
            if kind == "function":
                m = re.search(r"([~\w:]+)\s*\(", head)
                name = m.group(1) if m else "?"
            scopes.append((kind, line, name))
            head_start = i + 1
        elif c == "}":
            if scopes:
                kind, start, name = scopes.pop()
                if kind == "function":
                    found.append((start, line - start + 1, name))
            head_start = i + 1
        elif c == ";":
            head_start = i + 1
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=pathlib.Path(__file__).resolve().parent.parent)
    parser.add_argument("--max-file-lines", type=int, default=800)
    parser.add_argument("--max-function-lines", type=int, default=150)
    args = parser.parse_args()
    root = pathlib.Path(args.root)
    problems, files = [], 0
    for library in LIBRARIES:
        for path in sorted((root / library).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            files += 1
            where = path.relative_to(root)
            lines = path.read_text().count("\n")
            if lines > args.max_file_lines:
                problems.append(f"{where}: {lines} lines (at most {args.max_file_lines})")
            for start, length, name in functions(path):
                if length > args.max_function_lines:
                    problems.append(f"{where}:{start}: function {name} has {length} lines "
                                    f"(at most {args.max_function_lines})")
    for p in problems:
        print(p)
    print(f"check-layout: {files} files in {', '.join(LIBRARIES)}: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
