#!/usr/bin/env python3
"""parse_check.py FILE... -- Julia syntax check without Julia.

Julia cannot be installed on the machines that build ampx, so the Julia
binding's sources would otherwise reach users unparsed. This parses each
file with tree-sitter's Julia grammar (pip: tree-sitter, tree-sitter-julia;
bindings/julia/deps.sh installs them) and reports every syntax error
(an ERROR or MISSING node) with its line. It catches what a parser can --
unbalanced blocks and brackets, malformed calls -- not undefined names or
method errors.

Exit status: 0 every file parses; 1 a syntax error; 77 the grammar is not
installed.
"""
import sys


def main(paths: list[str]) -> int:
    try:
        import tree_sitter_julia
        from tree_sitter import Language, Parser
    except ImportError as error:
        print(f"parse_check: the tree-sitter Julia grammar is missing ({error}); "
              f"bindings/julia/deps.sh installs it")
        return 77
    parser = Parser(Language(tree_sitter_julia.language()))
    errors = 0
    for path in paths:
        source = open(path, "rb").read()
        stack = [parser.parse(source).root_node]
        while stack:
            node = stack.pop()
            if node.type == "ERROR" or node.is_missing:
                errors += 1
                text = source[node.start_byte:node.start_byte + 60].decode(errors="replace")
                what = f"missing {node.type}" if node.is_missing else "syntax error"
                print(f"{path}:{node.start_point[0] + 1}: {what} at {text!r}")
                continue
            stack.extend(reversed(node.children))
    print(f"parse_check: {len(paths)} Julia files, {errors} syntax error(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
