"""`Record`: immutable plain data with a readable repr, for the few value classes imported with ``nvscope``.

Why not ``dataclasses``: importing it pulls in ``inspect`` and costs ~6 ms, about half of what ``import nvscope`` is
allowed to cost a program or a pytest run that uses it. A record's fields are its ``__slots__``;
the subclass's ``__init__`` assigns them through `Record._init`; equality, hashing, repr and pickling follow.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Record"]


class Record:
    __slots__ = ()

    def _init(self, **fields: object) -> None:
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def _fields(self) -> tuple[str, ...]:
        return self.__slots__  # each subclass sets a tuple of names

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._fields())

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
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields())
        return f"{type(self).__name__}({fields})"

    def __reduce__(self) -> tuple[Callable[[type[Record], tuple[object, ...]], Record], tuple[object, ...]]:
        # Rebuilt field by field: a subclass's __init__ need not take its fields in __slots__ order.
        return (_rebuild, (type(self), self._values()))


def _rebuild(cls: type[Record], values: tuple[object, ...]) -> Record:
    record = object.__new__(cls)
    record._init(**dict(zip(cls.__slots__, values, strict=True)))
    return record
