"""Shape text: stored shapes read back whatever their workload, and labelled for people."""

from fp8bench.core.shapes import label, parse_stored, shape_label


def test_stored_shape_text_reads_back_with_integers_numbers_and_choices():
    grouped = {"g": 4, "tokens": 64, "top_k": 2, "n": 64, "k": 64, "route": "zipf", "alpha": 1.5, "seed": 0,
               "align": 32, "impl": "loop"}
    assert parse_stored(label(grouped)) == grouped
    assert parse_stored("op=all_gather,m=64,n=32") == {"op": "all_gather", "m": 64, "n": 32}
    # What an older or foreign writer left is kept as text, never refused: a page must draw every record.
    assert parse_stored("m=64k,n=nan,k=-3, d = 8 ,junk") == {"m": "64k", "n": "nan", "k": -3, "d": 8}


def test_gemm_shapes_are_labelled_mxnxk_and_others_as_stored():
    assert shape_label("m=128,n=256,k=64") == "128x256x64"
    assert shape_label("g=4,tokens=64,route=zipf") == "g=4,tokens=64,route=zipf"
