"""The SGLang versions the planner models, each by its sizer. A new version is one
``sizer_<version>.py`` module and one line here (and its name in ``sglang/versions.py``)."""

from __future__ import annotations

from exporter.diagnosis.planner import sizer_0_5_9, sizer_0_5_23
from exporter.diagnosis.planner.sizing import Sizer
from exporter.diagnosis.planner.types import PlanError

SIZERS: dict[str, Sizer] = {
    sizer_0_5_9.SIZER.version: sizer_0_5_9.SIZER,
    sizer_0_5_23.SIZER.version: sizer_0_5_23.SIZER,
}


def sizer_for(version: str) -> Sizer:
    if version not in SIZERS:
        raise PlanError(f"SGLang {version} is not modelled; use one of {', '.join(SIZERS)}")
    return SIZERS[version]
