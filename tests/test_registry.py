import pytest

from fp8bench.core.registry import Registry, UnknownNameError


def test_unknown_name_lists_accepted_names():
    reg: Registry[int] = Registry("widget")
    reg.add("a", 1)
    reg.add("b", 2)
    with pytest.raises(UnknownNameError) as info:
        reg.get("c")
    assert "unknown widget 'c'" in str(info.value)
    assert "accepted: a, b" in str(info.value)


def test_duplicates_and_blank_names_are_refused():
    reg: Registry[int] = Registry("widget")
    reg.add("a", 1)
    with pytest.raises(ValueError, match="already registered"):
        reg.add("a", 2)
    with pytest.raises(ValueError, match="non-empty"):
        reg.add(" a", 3)


def test_decorator_registers_and_keeps_order():
    reg: Registry[object] = Registry("thing")

    @reg.register("first")
    def first() -> None: ...

    reg.add("second", object())
    assert reg.names() == ["first", "second"]
    assert reg.get("first") is first
    assert "first" in reg and len(reg) == 2
