"""The fallback ladder as launched: the configured profiles and the automatic changes made
to each so far (pre-flight fixes, remedies). A value: a change returns a new ladder, which
the daemon keeps."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from exporter.config import Config
from exporter.sglang.flags import FlagValue, render_flags
from exporter.supervisor.remedies import Remedy


@dataclass(frozen=True)
class Ladder:
    config: Config
    patches: Mapping[int, Remedy] = field(default_factory=dict)  # profile index -> change

    def args(self, index: int) -> dict[str, FlagValue]:
        """A profile's flags, with the automatic changes applied to it so far."""
        args = self.config.profile_args(index)
        patch = self.patches.get(index)
        return patch.apply(args) if patch else args

    def command(self, index: int) -> list[str]:
        sglang = self.config.sglang
        return [sglang.python, "-m", sglang.module, *render_flags(self.args(index))]

    def commands(self) -> list[list[str]]:
        return [self.command(index) for index in range(len(self.config.profiles))]

    def label(self, index: int) -> str:
        name = self.config.profiles[index].name
        return f"{name}+auto" if index in self.patches else name

    def clamp(self, index: int) -> int:
        """A recorded profile index within today's ladder (a reload may have shortened it)."""
        return min(index, len(self.config.profiles) - 1)

    def patched(self, index: int, change: Remedy) -> Ladder:
        """``change`` made on top of the profile's earlier changes."""
        earlier = self.patches.get(index)
        return self.with_patch(index, earlier.then(change) if earlier else change)

    def with_patch(self, index: int, patch: Remedy) -> Ladder:
        return replace(self, patches={**self.patches, index: patch})

    def reloaded(self, config: Config) -> Ladder:
        return replace(self, config=config)

    def patch_record(self, index: int) -> dict | None:
        """The automatic change a launch carries, so a restarted daemon keeps it."""
        patch = self.patches.get(index)
        if patch is None:
            return None
        return {"set": patch.set, "remove": list(patch.remove), "reason": patch.reason}
