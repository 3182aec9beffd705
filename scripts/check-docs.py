#!/usr/bin/env python3
"""Checks STYLE.md's documentation rule on the pipeline library: every public declaration has
a `///` comment directly above it (attributes may stand between), and the comment of every
public function, initialiser or subscript that throws has a `- Throws:` line.

Usage: scripts/check-docs.py [--cases] [folder ...]   (default folder: Sources/ExporterKit)
Prints each declaration at fault as path:line and exits 1 if there is any. With --cases, also
lists the enum cases of public enums without a comment of their own (not a failure: cases
grouped on one line, or self-explanatory, may share their enum's comment).
"""
import os
import re
import sys

MODIFIERS = r"(?:(?:static|final|class|mutating|nonisolated|override|convenience|required|indirect|lazy|" \
    r"private\(set\)|fileprivate\(set\)|internal\(set\))\s+)*"
DECLARATION = re.compile(
    r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*" + MODIFIERS + r"(?:public|open)\s+" + MODIFIERS
    + r"(struct|enum|class|protocol|actor|func|init|var|let|typealias|subscript|case|extension)\b")
PUBLIC_ENUM = re.compile(r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*public\s+(?:indirect\s+)?enum\s+\w+")
CASE = re.compile(r"^\s*(?:indirect\s+)?case\s+\w")
THROWS = re.compile(r"\)\s*(?:async\s+)?(?:re)?throws\b")


def comment_above(lines, index):
    """The `///` lines directly above `lines[index]`, skipping attribute lines."""
    above = index - 1
    while above >= 0 and lines[above].strip().startswith("@"):
        above -= 1
    comment = []
    while above >= 0 and lines[above].strip().startswith("///"):
        comment.append(lines[above])
        above -= 1
    return comment


def signature(lines, index):
    """The declaration from `lines[index]` up to its body's opening brace (or a blank line)."""
    text = ""
    for line in lines[index:index + 15]:
        text += line
        if "{" in line or not line.strip():
            break
    return text.split("{")[0]


def check(path, undocumented, without_throws, cases):
    lines = open(path, encoding="utf-8").read().split("\n")
    enum_depths, depth = [], 0
    for index, line in enumerate(lines):
        code = line.split("//")[0]
        match = DECLARATION.match(line)
        where = f"{path}:{index + 1}: {line.strip()}"
        if match and match.group(1) != "extension":
            comment = comment_above(lines, index)
            if not comment:
                undocumented.append(where)
            elif match.group(1) in ("func", "init", "subscript") and THROWS.search(signature(lines, index)) \
                    and not any("- Throws:" in text for text in comment):
                without_throws.append(where)
        if enum_depths and depth == enum_depths[-1] + 1 and CASE.match(line) and not comment_above(lines, index):
            cases.append(where)
        if PUBLIC_ENUM.match(line):
            enum_depths.append(depth)
        depth += code.count("{") - code.count("}")
        while enum_depths and depth <= enum_depths[-1] and "}" in code:
            enum_depths.pop()


def main(arguments):
    show_cases = "--cases" in arguments
    folders = [argument for argument in arguments if argument != "--cases"] or ["Sources/ExporterKit"]
    undocumented, without_throws, cases = [], [], []
    for folder in folders:
        for directory, _, files in sorted(os.walk(folder)):
            for name in sorted(files):
                if name.endswith(".swift"):
                    check(os.path.join(directory, name), undocumented, without_throws, cases)
    for title, found in (("public declarations without ///", undocumented),
                         ("throwing public declarations without - Throws:", without_throws)):
        if found:
            print(f"{title}:")
            print("\n".join("  " + item for item in found))
    if show_cases and cases:
        print("enum cases of public enums without ///:")
        print("\n".join("  " + item for item in cases))
    return 1 if undocumented or without_throws else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
