"""A tiny PTX text builder: typed virtual registers, labels, and the module skeleton.

ptxas does register allocation, so every value may take a fresh virtual register."""
from __future__ import annotations

PREFIX = {"b32": "r", "f32": "f", "b64": "rd", "pred": "p", "b16": "h"}


class PtxBuilder:
    def __init__(self):
        self.lines: list[str] = []
        self.count = {k: 0 for k in PREFIX}
        self.labels = 0
        self.indent = "  "

    def reg(self, kind: str = "b32") -> str:
        n = self.count[kind]
        self.count[kind] += 1
        return f"%{PREFIX[kind]}{n}"

    def regs(self, kind: str, n: int) -> list[str]:
        return [self.reg(kind) for _ in range(n)]

    def label(self, base: str) -> str:
        self.labels += 1
        return f"{base.upper()}_{self.labels}"

    def __call__(self, line: str) -> None:
        self.lines.append(self.indent + line)

    def put_label(self, name: str) -> None:
        self.lines.append(f"{name}:")

    def comment(self, text: str) -> None:
        self.lines.append(f"{self.indent}// {text}")

    def declarations(self) -> list[str]:
        out = []
        for kind, prefix in PREFIX.items():
            if self.count[kind]:
                t = {"b32": ".b32", "f32": ".f32", "b64": ".b64", "pred": ".pred", "b16": ".b16"}[kind]
                out.append(f"  .reg {t} %{prefix}<{self.count[kind]}>;")
        return out
