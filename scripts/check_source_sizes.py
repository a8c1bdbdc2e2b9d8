#!/usr/bin/env python3
"""Fails when a source file is over 600 lines or a function over 100 lines.

A table (a function whose body is mostly one braced list, such as a schema or a name table) is
allowed to be longer: its length is data, not logic. Prints every offender with its place.
    scripts/check_source_sizes.py [ROOT]
"""
import pathlib
import re
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 100
FOLDERS = ("src", "tests", "bench", "fuzz")
SUFFIXES = {".cc", ".h", ".cu", ".cuh"}
CONTROL = re.compile(r"\b(if|for|while|switch|catch|do|else|try)\b\s*(\(|$)")


def strip_comments_and_strings(text):
    """The text with comments, string and character literals blanked, newlines kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            end = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    # Preprocessor lines are not code the braces belong to.
    return re.sub(r"(?m)^[ \t]*#.*$", "", "".join(out))


def functions(text):
    """(first line, last line, is_table) of each function body outside another function."""
    stack = []  # (kind, line, header) for each open brace
    header_start = 0
    found = []
    line = 1
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c in ";{}":
            if c == "{":
                header = text[header_start:i].strip()
                inside_function = any(kind == "function" for kind, _, _ in stack)
                if inside_function:
                    kind = "other"
                elif re.search(r"\b(namespace|extern)\b", header) and "(" not in header:
                    kind = "scope"
                elif re.search(r"\b(class|struct|union|enum)\b", header.split("(")[0]) and \
                        not header.rstrip().endswith(")"):
                    kind = "scope"
                elif "(" in header and not header.endswith("=") and not CONTROL.search(header):
                    kind = "function"
                else:
                    kind = "other"
                stack.append((kind, line, i))
            elif c == "}" and stack:
                kind, first, start = stack.pop()
                if kind == "function":
                    found.append((first, line, is_table(text[start + 1:i])))
            header_start = i + 1
    return found


def is_table(body):
    """Whether most of the body's lines lie inside one braced list (not a block of statements)."""
    lines = body.count("\n") + 1
    depth, widest, open_at, last_semicolon = 0, 0, None, -1
    for i, c in enumerate(body):
        if c == ";" and depth == 0:
            last_semicolon = i
        if c == "{":
            if depth == 0:
                before = body[last_semicolon + 1:i]
                is_list = re.search(r"(=|return|\(|,)\s*$", before) or before.strip() == ""
                open_at = i if is_list and not CONTROL.search(before) else None
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0 and open_at is not None:
                widest = max(widest, body.count("\n", open_at, i) + 1)
    return widest >= 0.8 * lines


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    problems = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SUFFIXES or "node_modules" in path.parts:
                continue
            text = path.read_text(errors="replace")
            name = path.relative_to(root)
            lines = text.count("\n")
            if lines > MAX_FILE_LINES:
                problems.append(f"{name}: {lines} lines (at most {MAX_FILE_LINES})")
            for first, last, table in functions(strip_comments_and_strings(text)):
                length = last - first + 1
                if length > MAX_FUNCTION_LINES and not table:
                    problems.append(f"{name}:{first}: a function of {length} lines "
                                    f"(at most {MAX_FUNCTION_LINES})")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} files or functions too long: split them by what each part does")
        return 1
    print("every source file is at most 600 lines and every function at most 100 (tables aside)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
