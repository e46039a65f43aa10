"""The hardware rows by name (bench/simulation/hardware.py): a row answers to the name it is
printed under, and an unknown accelerator is refused in one line listing the known ones."""

import pytest

from samspec_bench.bench.simulation.hardware import TABLE, hardware
from samspec_bench.errors import UserError


@pytest.mark.parametrize("key", list(TABLE))
def test_a_row_answers_to_the_name_it_is_printed_under(key):
    assert hardware(TABLE[key].name) is TABLE[key]


@pytest.mark.parametrize("name, key", [("H200 SXM", "H200"), ("h200_sxm", "H200"), ("A100 SXM", "A100"),
                                       ("H100 SXM", "H100")])
def test_the_sxm_form_of_a_row_names_it(name, key):
    assert hardware(name) is TABLE[key]


@pytest.mark.parametrize("name", ["B200", "MI300X", "H100 PCIe", "A100 40GB"])
def test_an_unknown_accelerator_or_another_variant_is_refused_listing_the_rows(name):
    with pytest.raises(UserError) as e:
        hardware(name)
    msg = str(e.value)
    assert f"hardware {name!r} is not known" in msg and "H100, H200, A100, H20, 910B, 910C, cpu" in msg
    assert "\n" not in msg
