"""The core every front end lowers to: the task-graph IR (:mod:`kalypso.core.graph`),
token-exact prompts (:mod:`kalypso.core.prompt`), the synchronous scheduler core
(:mod:`kalypso.core.scheduler`) with its policies (:mod:`kalypso.core.policies`), memory
accounting (:mod:`kalypso.core.ledger`, :mod:`kalypso.core.memory`) and the async runner
(:mod:`kalypso.core.runner`). It knows nothing of tables or workflows; see
``docs/architecture.md``."""
