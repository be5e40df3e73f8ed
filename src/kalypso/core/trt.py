"""The templated radix tree (the Helium paper's section 5, Fig. 4, App. A Alg. 2), built
on *tokens*.

Each LLM node's prompt is a template: the token ids of its static parts and message
boundaries (from the model's chat template), and placeholders for its slots (an input, a
Python step's text, another call's answer). Inserting every template into a radix tree
over these items shows which calls share which prefix, and how much:

* two nodes share, in every query, the prefix up to their lowest common ancestor; with
  no placeholder on that path the prefix is the same for every query (a *static* prefix,
  worth warming), with one it is shared only within a query (run those calls query by
  query);
* a node's static prefix is its tokens before the first placeholder.

The reference implementation compares characters; a prefix that ends inside a message is
then rendered with the template's end-of-turn and loses its last block. Tokens avoid it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kalypso.core.graph import LLMNode, Slot, Text
from kalypso.core.prompt import ChatLayout

Item = int | tuple[str, str]
"""A token id, or ``("slot", source)`` for a placeholder."""


def walk_prompt(
    node: LLMNode, layout: ChatLayout, slot: Callable[[Slot], Sequence[Item] | None]
) -> tuple[tuple[Item, ...], bool]:
    """``node``'s prompt as items: its boundary and static token ids, and ``slot(part)``
    for each slot; the walk stops at the first slot for which that is None. Returns the
    items and whether the walk reached the prompt's end."""
    bounds = layout.boundaries(tuple(m.role for m in node.messages))
    items: list[Item] = []
    for boundary, message in zip(bounds, node.messages, strict=False):
        items.extend(boundary)
        for part in message.parts:
            filled = layout.text_ids(part.text) if isinstance(part, Text) else slot(part)
            if filled is None:
                return tuple(items), False
            items.extend(filled)
    items.extend(bounds[-1])
    return tuple(items), True


def template(node: LLMNode, layout: ChatLayout) -> tuple[Item, ...]:
    """``node``'s prompt as items: boundary and static token ids, slot placeholders."""
    return walk_prompt(node, layout, lambda part: [("slot", part.source.describe())])[0]


@dataclass(eq=False)
class TreeNode:
    """A radix-tree node: the items of its edge from the parent, and its children."""

    items: tuple[Item, ...] = ()
    children: list[TreeNode] = field(default_factory=list)
    leaves: list[str] = field(default_factory=list)
    """LLM nodes whose template ends here."""
    parent: TreeNode | None = None

    @property
    def has_placeholder(self) -> bool:
        return any(isinstance(i, tuple) for i in self.items)

    def static_tokens(self) -> int:
        return sum(1 for i in self.items if isinstance(i, int))


class TemplatedRadixTree:
    """The radix tree of a graph's LLM node templates."""

    def __init__(self, templates: dict[str, tuple[Item, ...]]) -> None:
        self.root = TreeNode()
        self.templates = templates
        self.leaf_of: dict[str, TreeNode] = {}
        for node_id in sorted(templates):
            self._insert(node_id, templates[node_id])

    @classmethod
    def of(cls, nodes: Sequence[LLMNode], layout: ChatLayout) -> TemplatedRadixTree:
        return cls({n.node_id: template(n, layout) for n in nodes})

    def _insert(self, node_id: str, items: tuple[Item, ...]) -> None:
        current = self.root
        rest = items
        while rest:
            child = next((c for c in current.children if c.items[0] == rest[0]), None)
            if child is None:
                new = TreeNode(rest, parent=current)
                current.children.append(new)
                current = new
                break
            common = common_length(child.items, rest)
            if common < len(child.items):  # split the edge
                lower = TreeNode(child.items[common:], child.children, child.leaves, child)
                for grandchild in lower.children:
                    grandchild.parent = lower
                for moved in lower.leaves:  # their templates now end at the lower half
                    self.leaf_of[moved] = lower
                child.items, child.children, child.leaves = child.items[:common], [lower], []
            current = child
            rest = rest[common:]
        current.leaves.append(node_id)
        self.leaf_of[node_id] = current

    # ---- what it predicts ----------------------------------------------------------
    def static_prefix_tokens(self, node_id: str) -> int:
        """Tokens of ``node_id``'s template before its first placeholder."""
        count = 0
        for item in self.templates[node_id]:
            if isinstance(item, tuple):
                break
            count += 1
        return count

    def shared_items(self, a: str, b: str) -> tuple[Item, ...]:
        """The template prefix two nodes share (items up to their common ancestor)."""
        return self.templates[a][: common_length(self.templates[a], self.templates[b])]

    def path(self, node_id: str) -> list[TreeNode]:
        """Tree nodes from the root's child down to ``node_id``'s leaf."""
        out = []
        current: TreeNode | None = self.leaf_of[node_id]
        while current is not None and current is not self.root:
            out.append(current)
            current = current.parent
        return out[::-1]

    def query_group(self, node_id: str) -> TreeNode | None:
        """The highest tree node on ``node_id``'s path whose edge holds a placeholder: the
        nodes below it share a prefix within each query (None: no placeholder)."""
        for tree_node in self.path(node_id):
            if tree_node.has_placeholder:
                return tree_node
        return None

    def explain(self) -> str:
        lines = ["templated radix tree (tokens, [slot]s):"]

        def walk(node: TreeNode, depth: int) -> None:
            for child in node.children:
                slots = [i[1] for i in child.items if isinstance(i, tuple)]
                shown = f"{child.static_tokens()} tokens" + (f" + {slots}" if slots else "")
                leaves = f" -> {', '.join(child.leaves)}" if child.leaves else ""
                lines.append(f"{'  ' * (depth + 1)}{shown}{leaves}")
                walk(child, depth + 1)

        walk(self.root, 0)
        return "\n".join(lines)


def common_length(a: Sequence[object], b: Sequence[object]) -> int:
    """Leading items two sequences have in common."""
    count = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        count += 1
    return count
