from fp8bench.peaks import device_table, peak_key, table_peak
from fp8bench.recipes import PRECISIONS


def test_every_table_value_names_a_known_source():
    table = device_table()
    assert table["table_version"] >= 1
    for name, entry in table["devices"].items():
        for key, value in entry.items():
            assert key in table["units"], (name, key)
            assert isinstance(value[0], (int, float)) and value[0] > 0, (name, key)
            assert value[1] in table["sources"], (name, key)
            assert value[2:] in ([], ["unconfirmed"]), (name, key)


def test_dense_figures_are_not_sparsity_figures():
    h100 = table_peak("NVIDIA H100 80GB HBM3", "fp8")
    assert h100.value == 1979  # 3958 "with sparsity" halved
    assert table_peak("NVIDIA H100 80GB HBM3", "fp32").value == 67  # not the TF32 figure
    assert table_peak("NVIDIA H100 80GB HBM3", "mem_bw").value == 3.35


def test_precisions_map_to_columns():
    assert peak_key(PRECISIONS.get("tf32")) == "tf32"
    assert peak_key(PRECISIONS.get("fp8_delayed")) == "fp8"
    assert peak_key(PRECISIONS.get("mxfp8")) == "mxfp8"
    # 4-bit recipes are held to an FP4 rate, which the table does not list: no percentage rather than a wrong one.
    assert peak_key(PRECISIONS.get("nvfp4")) == peak_key(PRECISIONS.get("mxfp4")) == "fp4"
    assert table_peak("NVIDIA B200", "fp4") is None
    # MX falls back to the FP8 rate where no separate figure is listed; unknown devices have no peak.
    assert table_peak("NVIDIA B200", "mxfp8").unconfirmed
    assert table_peak("NVIDIA H100 80GB HBM3", "mxfp8").value == 1979
    assert table_peak("Some Future GPU", "bf16") is None
