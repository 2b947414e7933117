"""`nvscope check`'s judge of option names: unknown names (did-you-mean, wrong list, arguments per call) from the
bundled catalog, and names some of the nvFuser versions in use lack (a configured range, else the installed nvFuser).
The installed nvFuser is found from its metadata, never imported; nvFuser is never asked (no probe)."""

from __future__ import annotations

import warnings

from nvscope._check._config import ConfigError
from nvscope._core import (
    NIGHTLY_DATES,
    VERSIONS,
    Catalog,
    UnknownOptionError,
    cut,
    installed_nvfuser,
)
from nvscope._core import (
    bundled_options as _bundled,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from packaging.version import Version

__all__ = ["Names"]


class Names:
    """Judges option names: unknown ones (did-you-mean, wrong list, arguments per call) and, where the nvFuser
    versions in use are known, names some of them lack."""

    def __init__(self, nvfuser: str | None, where: str) -> None:
        # No installed nvFuser: the probe, which runs one, is never reached; messages cover the whole table.
        self.whole = Catalog(_bundled(), None)
        self.versions, self.describe = self._versions(nvfuser, where)

    def _versions(self, nvfuser: str | None, where: str) -> tuple[list[Version] | None, str]:
        from packaging.version import Version

        first, last = VERSIONS[0][0], VERSIONS[-1][0]
        covered = f"the bundled catalog covers nvFuser {first} to {last}"
        if nvfuser is not None:
            from packaging.specifiers import InvalidSpecifier, SpecifierSet

            try:
                if not nvfuser.strip():  # SpecifierSet("") holds every version: an empty range is a slip
                    raise InvalidSpecifier(nvfuser)
                spec = SpecifierSet(nvfuser)
            except InvalidSpecifier:
                raise ConfigError(f"nvfuser = {cut(nvfuser, 60, repr)} ({where}) is not a version range: write it "
                                  'as pip does, e.g. ">=0.2.35" or ">=0.2.33,<0.2.36"') from None
            inside = sorted(v for v in self._candidates() if spec.contains(v))
            if not inside:
                return None, (f"nvFuser {nvfuser} ({where}), which holds no version {covered}: names checked "
                              "against the whole catalog")
            shown = str(inside[0]) if len(inside) == 1 else f"{inside[0]} to {inside[-1]}"
            return inside, f"nvFuser {nvfuser} ({where}): {shown} of the bundled catalog"
        installed = installed_nvfuser()
        if installed is None:
            return None, f"any nvFuser {first} to {last} (bundled catalog; no nvFuser installed, no range configured)"
        if Version(installed.version.base_version) > Version(last):
            return None, (f"installed nvFuser {installed.version} ({installed.distribution}), newer than the bundled "
                          f"catalog ({covered}): names checked against the whole catalog")
        return [installed.version], f"installed nvFuser {installed.version} ({installed.distribution})"

    def _candidates(self) -> set[Version]:
        """The releases the catalog covers, and the nightlies on either side of each day a name came or left."""
        import datetime

        from packaging.version import Version

        found = {Version(v) for v, _ in VERSIONS}
        for kind, name, came, left in NIGHTLY_DATES:
            option = self.whole.get(kind, name)  # type: ignore[arg-type]
            for day, version in ((came, option and option.since), (left, option and option.until)):
                if day and version:
                    date = datetime.date.fromisoformat(day)
                    for d in (date - datetime.timedelta(days=1), date):
                        found.add(Version(f"{version}.dev{d:%Y%m%d}"))
        return found

    def judge(self, kind: str, name: str, per_call: bool, spelling: str) -> tuple[str, str] | None:
        """(finding kind, message) for a bad name, or None."""
        base = name if per_call else name.partition("(")[0].strip()
        info = self.whole.get(kind, base)  # type: ignore[arg-type]
        if info is None or (per_call and info.requires_args):
            with warnings.catch_warnings():  # NVSCOPE_TRUST_NVFUSER would let the name through with a warning
                warnings.simplefilter("ignore")
                try:
                    self.whole.check(kind, base, spelling=spelling)  # type: ignore[arg-type]
                except UnknownOptionError as error:
                    return "name", str(error)
            return "name", f"unknown nvFuser {kind} option {cut(base, 48, repr)} (`nvscope options` lists them all)"
        if self.versions:
            lacking = [v for v in self.versions if not info.available_in(v)]
            if lacking:
                days = " and ".join(d for d in (info.since_day and f"nightlies from {info.since_day}",
                                                info.until_day and f"before {info.until_day}") if d)
                return "version", (f"nvFuser {kind} option {base!r} exists only in nvFuser {info.versions}"
                                   f"{f' ({days})' if days else ''}; {lacking[0]} is in the range in use")
        return None
