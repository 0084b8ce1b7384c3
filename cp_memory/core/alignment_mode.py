"""AlignmentMode: which cached prefixes a request may adopt, as one value (exact | superset | swap).

    AlignmentMode.exact()                  # only prefixes made of the request's own blocks (the paper)
    AlignmentMode.superset(0.1)            # may *add* up to int(0.1 * n) cached blocks it did not retrieve
    AlignmentMode.swap(0.1)                # may *replace* as many of its lowest-ranked blocks, never one
                                           # in the top DEFAULT_PROTECT fraction of the ranking
    AlignmentMode.swap(0.25, protect=0.5)

The mode is chosen once and travels whole: the index aligns with it (:mod:`cp_memory.core.superset` explains
the two wider modes), the mem0 wrapper builds it from its configuration, a restored snapshot takes the
caller's mode (never a stored one, see :meth:`~cp_memory.core.index.ContextIndex.restore`) and the benchmarks
parse their mode names into it. Superset and swap exclude each other by construction.

The flat form — three numbers ``extra_budget``, ``swap_budget``, ``protect``, as ``ContextPilotConfig``,
``ContextIndex(...)`` keywords and snapshots spell it — is read by :meth:`AlignmentMode.from_options`
(the one place it is validated) and written by :meth:`AlignmentMode.options`. :data:`DEFAULT_PROTECT` is the
one source of the ``protect`` default. Pure: standard library only, like the rest of the core.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .checks import fraction

__all__ = ["DEFAULT_PROTECT", "AlignmentKind", "AlignmentMode"]

#: swap never drops a block ranked in this top fraction of the request (on LoCoMo the same front as 0.5 at
#: swap_budget 0.1 and safer above it; docs/results/locomo_front_model.json)
DEFAULT_PROTECT = 0.75


class AlignmentKind(str, Enum):
    """The three ways a request may be aligned (module doc)."""

    EXACT = "exact"
    SUPERSET = "superset"
    SWAP = "swap"


@dataclass(frozen=True)
class AlignmentMode:
    """One alignment mode: ``kind``, its ``budget`` (a fraction of the request size; 0 for exact) and, for
    swap, ``protect`` (the top fraction of the ranking never dropped). Build it with :meth:`exact`,
    :meth:`superset`, :meth:`swap` or :meth:`from_options`; an invalid combination raises ``ValueError``."""

    kind: AlignmentKind = AlignmentKind.EXACT
    budget: float = 0.0
    protect: float = DEFAULT_PROTECT

    def __post_init__(self) -> None:
        try:
            kind = AlignmentKind(self.kind)
        except ValueError:
            raise ValueError(
                f"alignment kind must be one of {[k.value for k in AlignmentKind]}, got {self.kind!r}"
            ) from None
        budget = fraction(self.budget, f"{kind.value} budget")
        protect = fraction(self.protect, "protect")
        if kind is AlignmentKind.EXACT and budget != 0:
            raise ValueError(f"exact alignment takes no budget, got {budget!r}")
        if kind is not AlignmentKind.EXACT and budget == 0:
            raise ValueError(f"{kind.value} alignment needs a budget in (0, 1]; a budget of 0 is exact alignment")
        if kind is not AlignmentKind.SWAP and protect != DEFAULT_PROTECT:
            raise ValueError(f"protect applies to swap alignment only, not {kind.value}")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "budget", budget)
        object.__setattr__(self, "protect", protect)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def exact(cls) -> AlignmentMode:
        return cls()

    @classmethod
    def superset(cls, budget: float) -> AlignmentMode:
        return cls(AlignmentKind.SUPERSET, budget)

    @classmethod
    def swap(cls, budget: float, protect: float = DEFAULT_PROTECT) -> AlignmentMode:
        return cls(AlignmentKind.SWAP, budget, protect)

    @classmethod
    def resolve(
        cls,
        mode: AlignmentMode | None,
        extra_budget: float | None = None,
        swap_budget: float | None = None,
        protect: float | None = None,
    ) -> AlignmentMode:
        """``mode`` as given, or the one the flat options describe (never both: ``TypeError``)."""
        flat = {
            k: v
            for k, v in (("extra_budget", extra_budget), ("swap_budget", swap_budget), ("protect", protect))
            if v is not None
        }
        if mode is None:
            return cls.from_options(**flat)
        if not isinstance(mode, AlignmentMode):
            raise TypeError(f"mode must be an AlignmentMode, got {type(mode).__name__}")
        if flat:
            raise TypeError(f"pass mode or the flat options {sorted(flat)}, not both")
        return mode

    @classmethod
    def from_options(
        cls, extra_budget: float = 0.0, swap_budget: float = 0.0, protect: float = DEFAULT_PROTECT
    ) -> AlignmentMode:
        """The mode the flat options describe: swap when ``swap_budget > 0``, superset when
        ``extra_budget > 0``, else exact (``protect`` is validated even when swap is off)."""
        extra = fraction(extra_budget, "extra_budget")
        swap = fraction(swap_budget, "swap_budget")
        guard = fraction(protect, "protect")
        if extra > 0 and swap > 0:
            raise ValueError(
                "extra_budget and swap_budget are exclusive: superset adds memories to the prompt, "
                "swap replaces low-ranked ones; choose one (set the other to 0)"
            )
        if swap > 0:
            return cls.swap(swap, guard)
        if extra > 0:
            return cls.superset(extra)
        return cls.exact()

    # ------------------------------------------------------------------ views
    @property
    def extra_budget(self) -> float:
        """The superset budget (0.0 unless superset)."""
        return self.budget if self.kind is AlignmentKind.SUPERSET else 0.0

    @property
    def swap_budget(self) -> float:
        """The swap budget (0.0 unless swap)."""
        return self.budget if self.kind is AlignmentKind.SWAP else 0.0

    def options(self) -> dict[str, float]:
        """The flat form (``extra_budget``, ``swap_budget``, ``protect``); ``from_options`` reads it back."""
        return {"extra_budget": self.extra_budget, "swap_budget": self.swap_budget, "protect": self.protect}

    def __str__(self) -> str:
        if self.kind is AlignmentKind.EXACT:
            return "exact"
        if self.kind is AlignmentKind.SUPERSET:
            return f"superset({self.budget:g})"
        return f"swap({self.budget:g}, protect={self.protect:g})"
