"""docs/python.md: the threadgate_producer API reference, generated from the package itself
(`npm run docs:python` writes it; a unit test fails when the file differs from what this prints).

Signatures come from `inspect`, docstrings from the functions and classes, and the one-line
`#:` comments above a constant or a dataclass field from the source (`ast`), so the page says
exactly what the code says. Not part of the wheel (pyproject.toml packages threadgate_producer).
"""

import ast
import dataclasses
import inspect
import os
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import threadgate_producer as tg  # noqa: E402

OUT = os.path.join(HERE, "..", "docs", "python.md")


def comments(module):
    """`#:` comments of a module's source: the assigned names (or dataclass fields) below each, in order."""
    source = inspect.getsource(module)
    lines = source.splitlines()
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            text, line = [], node.lineno - 2
            while line >= 0 and lines[line].strip().startswith("#:"):
                text.insert(0, lines[line].strip()[2:].strip())
                line -= 1
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name) and text:
                        found[name.id] = " ".join(text)
    return found


def module_of(obj):
    return sys.modules[obj.__module__] if hasattr(obj, "__module__") else None


def signature(name, fn):
    text = str(inspect.signature(fn))
    text = text.replace("threadgate_producer.send.", "").replace("threadgate_producer.outcomes.", "")
    return f"{name}{text}".replace("<built-in function sleep>", "time.sleep").replace(
        "<built-in function monotonic>", "time.monotonic")


def doc(obj):
    return inspect.cleandoc(obj.__doc__ or "").strip()


def function_section(name, fn):
    return f"### `{name}`\n\n```python\n{signature(name, fn)}\n```\n\n{doc(fn)}\n"


def class_section(name, cls):
    notes = comments(module_of(cls))
    rows = ["| Field | Type | Default | Meaning |", "|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f"`{f.default!r}`"
        elif f.default_factory is not dataclasses.MISSING:
            default = f"`{f.default_factory()!r}`"
        else:
            default = ""
        kind = inspect.formatannotation(f.type).replace("typing.", "").replace("threadgate_producer.send.", "")
        rows.append(f"| `{f.name}` | `{kind}` | {default} | {notes.get(f.name, '')} |")
    text = doc(cls)
    # A dataclass without a docstring gets its generated signature as __doc__: leave it out.
    if text.startswith(f"{name}("):
        text = ""
    return f"### `{name}`\n\n{text}\n\n" + "\n".join(rows) + "\n"


def constants_section():
    rows = ["| Name | Value | Meaning |", "|---|---|---|"]
    for name in tg.__all__:
        value = getattr(tg, name)
        if callable(value) or isinstance(value, type):
            continue
        notes = {}
        for module in (sys.modules["threadgate_producer"], *[sys.modules[m] for m in sorted(sys.modules)
                                                              if m.startswith("threadgate_producer.")]):
            notes = {**comments(module), **notes}
        shown = "the job schema (a dict)" if name == "SCHEMA" else f"`{value!r}`"
        rows.append(f"| `{name}` | {shown} | {notes.get(name, '')} |")
    return "\n".join(rows) + "\n"


def render():
    functions = [(n, getattr(tg, n)) for n in tg.__all__
                 if inspect.isfunction(getattr(tg, n))]
    classes = [(n, getattr(tg, n)) for n in tg.__all__ if isinstance(getattr(tg, n), type)]
    head = [
        "# Python API: `threadgate_producer`",
        "",
        "**For:** data engineers sending records from Spark, Ray, Flink or a plain Python job and waiting",
        "for their outcomes. Generated from the package (`npm run docs:python`); a test fails when it",
        "differs. Recipes: [producers](producers.md); the IAM a producer needs: `grantProduce` in",
        "[the construct reference](construct.md#grants).",
        "",
        "```python",
        textwrap.dedent(doc(tg).split("\n\n", 1)[1]).strip(),
        "```",
        "",
        "Every function takes its boto3 client as a keyword (`sqs=`, `dynamodb=`, `cloudformation=`);",
        "without one it makes `boto3.client(...)` from the environment's credentials and region.",
        "",
        "## Functions",
        "",
        "",
    ]
    body = [function_section(n, f) for n, f in functions]
    body += ["## Results", ""] + [class_section(n, c) for n, c in classes]
    body += ["## Constants", "", constants_section()]
    return "\n".join(head) + "\n".join(body)


if __name__ == "__main__":
    if sys.argv[1:] == ["--print"]:
        sys.stdout.write(render())
    else:
        with open(OUT, "w", encoding="utf-8") as f:
            f.write(render())
        print(f"wrote {os.path.normpath(OUT)}")
