"""A job as data: a table plan or a workflow, its inputs and its run options.

This is what ``kalypso submit`` and :class:`kalypso.Client` send to ``kalypso serve``. It
carries no code and no paths: a plan's Python steps name functions registered on the
server (:func:`kalypso.register_function`), and tables travel inline (JSON records or
Parquet bytes). :func:`from_spec` rebuilds the plan or workflow a spec describes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from kalypso.core.errors import PlanError
from kalypso.core.policies import PolicyError, get_policy
from kalypso.query import Table
from kalypso.query.spec import TableSpec, table_from_spec
from kalypso.workflow import Workflow
from kalypso.workflow.spec import WorkflowSpec, workflow_from_spec

MAX_METADATA_KEYS = 16
MAX_CALL_TIMEOUT_S = 24 * 3600.0
MAX_COMPLETION_WINDOW_S = 7 * 24 * 3600.0


class JobOptions(BaseModel):
    """How the server runs a job (a subset of :class:`~kalypso.core.options.RunOptions`:
    the ones that are the submitter's choice, not the server's)."""

    model_config = ConfigDict(extra="forbid")

    policy: str | None = Field(default=None, min_length=1, max_length=100)
    """A policy name (None: the front end's default)."""
    system_prompt: str | None = Field(default=None, max_length=20_000)
    call_timeout_s: float | None = Field(default=None, gt=0, le=MAX_CALL_TIMEOUT_S)

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, policy: str | None) -> str | None:
        if policy is not None:
            try:
                get_policy(policy)
            except PolicyError as exc:
                raise ValueError(str(exc)) from None
        return policy

    def run_options(self) -> dict[str, Any]:
        """The options as :class:`~kalypso.core.options.RunOptions` keywords (unset ones
        left out, so the front end's defaults apply)."""
        return self.model_dump(exclude_none=True)


class JobSpec(BaseModel):
    """A job: ``plan`` (a table plan or a workflow), the workflow's ``inputs`` (input name
    -> one text per query; a table plan carries its rows), ``options``, an optional
    ``completion_window_s``, and free-form
    ``metadata`` (at most 16 short string pairs, as OpenAI's batches have)."""

    model_config = ConfigDict(extra="forbid")

    plan: Annotated[TableSpec | WorkflowSpec, Field(discriminator="kind")]
    inputs: dict[str, list[str]] | None = Field(default=None, validate_default=True)
    options: JobOptions = Field(default_factory=JobOptions)
    completion_window_s: float | None = Field(default=None, gt=0, le=MAX_COMPLETION_WINDOW_S)
    """The job ends ``expired`` if it has not finished this long after its run starts."""
    metadata: dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]] = (
        Field(default_factory=dict)
    )

    @field_validator("inputs")
    @classmethod
    def _inputs_match_kind(
        cls, inputs: dict[str, list[str]] | None, info: ValidationInfo
    ) -> dict[str, list[str]] | None:
        plan = info.data.get("plan")
        if isinstance(plan, WorkflowSpec) and inputs is None:
            raise ValueError("a workflow job needs its inputs (input name -> texts)")
        if isinstance(plan, TableSpec) and inputs is not None:
            raise ValueError("a table job carries its rows in its plan; give no inputs")
        return inputs

    @field_validator("metadata")
    @classmethod
    def _few_metadata_keys(cls, metadata: dict[str, str]) -> dict[str, str]:
        if len(metadata) > MAX_METADATA_KEYS:
            raise ValueError(f"at most {MAX_METADATA_KEYS} keys")
        return metadata

    @property
    def kind(self) -> Literal["table", "workflow"]:
        return "table" if isinstance(self.plan, TableSpec) else "workflow"


def from_spec(spec: TableSpec | WorkflowSpec | Mapping[str, Any]) -> Table | Workflow:
    """The plan (:class:`~kalypso.query.Table`) or workflow a spec describes: a
    :class:`TableSpec`, a :class:`WorkflowSpec`, or either as decoded JSON (told apart
    by its ``kind``).

    Raises:
        pydantic.ValidationError: a malformed spec (naming the field).
        PlanError: a well-formed spec of an invalid plan (an unknown column, a function
            not registered here).
    """
    if isinstance(spec, TableSpec):
        return table_from_spec(spec)
    if isinstance(spec, WorkflowSpec):
        return workflow_from_spec(spec)
    if not isinstance(spec, Mapping):
        raise PlanError(f"a spec is a mapping with a 'kind', got {type(spec).__name__}")
    kind = spec.get("kind")
    if kind == "table":
        return table_from_spec(spec)
    if kind == "workflow":
        return workflow_from_spec(spec)
    raise PlanError(f"a spec's kind is 'table' or 'workflow', got {kind!r}")
