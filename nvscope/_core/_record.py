"""`Record`: immutable plain data with a readable repr, without importing ``dataclasses`` (and ``inspect``) at
``import nvscope``. Fields are the ``__slots__``, set by the subclass's ``__init__`` through `Record._init`."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Record"]


class Record:
    __slots__: tuple[str, ...] = ()

    def _init(self, **fields: object) -> None:
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"

    def __reduce__(self) -> tuple[Callable[[type[Record], tuple[object, ...]], Record], tuple[object, ...]]:
        return (_rebuild, (type(self), self._values()))


def _rebuild(cls: type[Record], values: tuple[object, ...]) -> Record:
    record = object.__new__(cls)
    record._init(**dict(zip(cls.__slots__, values, strict=True)))
    return record
