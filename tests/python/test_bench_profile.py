"""bench/hopper_profile.py reads Nsight Compute's CSV: the figures issue 15's note rests on (each
launch's time, SM clock and tensor-pipe busy fraction) come out in base units, and output it
cannot read is an error rather than a table of wrong numbers."""
import argparse
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import hopper_profile  # noqa: E402

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def row(launch, kernel, metric, unit, value):
    return (f'"{launch}","1259","python3.12","127.0.0.1","{kernel}","1","7","(288, 1, 1)","(132, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","{metric}","{unit}","{value}"')


# Lines as ncu wrote them on the H100 machine (bench/hopper_profile.py --size 4096 --raw), with its
# notes before the table and a metric of another name that is not read.
OUTPUT = "\n".join([
    "==WARNING== Note: Running with unmodified GPU clocks. If not controlled otherwise, profiling results may be "
    "inconsistent.",
    "==PROF== Connected to process 1259 (/usr/bin/python3.12)",
    HEADER,
    row(0, "HopperMatmulV6", "gpu__time_duration.sum", "ns", "185,088"),
    row(0, "HopperMatmulV6", "sm__cycles_elapsed.avg.per_second", "hz", "1,569,728,502.61"),
    row(0, "HopperMatmulV6", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed", "%", "87.49"),
    row(0, "HopperMatmulV6", "sm__warps_active.avg.pct_of_peak_sustained_active", "%", "14.06"),
    row(1, "nvjet_sm90_hsh_128x256_64x4_2x1_v_bz_coopA_TNN", "gpu__time_duration.sum", "usecond", "179.81"),
    row(1, "nvjet_sm90_hsh_128x256_64x4_2x1_v_bz_coopA_TNN", "sm__cycles_elapsed.avg.per_second", "Ghz", "1.57"),
    row(1, "nvjet_sm90_hsh_128x256_64x4_2x1_v_bz_coopA_TNN",
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed", "%", "89.9"),
])


def test_each_launch_in_base_units():
    got = hopper_profile.parse_ncu_csv(OUTPUT)
    assert [g["kernel"] for g in got] == ["HopperMatmulV6", "nvjet_sm90_hsh_128x256_64x4_2x1_v_bz_coopA_TNN"]
    assert got[0]["time_us"] == pytest.approx(185.088)
    assert got[0]["clock_ghz"] == pytest.approx(1.5697285)
    assert got[0]["tensor_pct"] == pytest.approx(87.49)
    assert got[1]["time_us"] == pytest.approx(179.81)
    assert got[1]["clock_ghz"] == pytest.approx(1.57)
    assert got[1]["tensor_pct"] == pytest.approx(89.9)


@pytest.mark.parametrize("value, unit, want", [("1.47", "msecond", 1.47e-3), ("1.47", "ms", 1.47e-3),
                                               ("188.6", "us", 188.6e-6), ("1,540", "Mhz", 1.54e9),
                                               ("1.5e9", "cycle/second", 1.5e9), ("2", "second", 2.0)])
def test_units(value, unit, want):
    assert hopper_profile._in_base_units(value, unit) == pytest.approx(want)


def test_what_it_cannot_read_is_an_error():
    with pytest.raises(ValueError, match="unit 'furlong'"):
        hopper_profile._in_base_units("3", "furlong")
    with pytest.raises(ValueError, match="no ncu CSV table"):
        hopper_profile.parse_ncu_csv("==PROF== Disconnected from process 1259\n")
    without_clock = "\n".join(ln for ln in OUTPUT.splitlines() if "HopperMatmulV6" not in ln or "per_second" not in ln)
    with pytest.raises(ValueError, match=r"launch 0 \(HopperMatmulV6\): ncu gave no sm__cycles_elapsed"):
        hopper_profile.parse_ncu_csv(without_clock)


def test_shapes_are_three_positive_ints():
    assert hopper_profile.parse_shape("4000,4000,4000") == (4000, 4000, 4000)
    assert hopper_profile.parse_shape("8192,1024,8192") == (8192, 1024, 8192)
    for bad in ("4096", "1,2", "1,2,3,4", "8,0,8", "a,b,c", "-1,8,8"):
        with pytest.raises(argparse.ArgumentTypeError, match="three positive ints"):
            hopper_profile.parse_shape(bad)
