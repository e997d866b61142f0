"""CostModel: validated pure data; presets carry documented numbers."""

import pytest

from orchestrator import PRESETS, CostModel, CostModelError, get_cost_model


def test_duration_formula_is_pipelined_min_bandwidth_plus_latencies():
    cm = CostModel(100.0, 50.0, network_latency=1.0, disk_latency=2.0, piece_overhead=0.5)
    assert cm.duration(100) == pytest.approx(3.0 + 2.0)
    assert cm.duration(100, split=True) == pytest.approx(5.5)
    assert cm.duration([0, 50]).tolist() == [3.0, 4.0]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("network_bandwidth", 0.0, "must be > 0"),
        ("disk_bandwidth", float("inf"), "must be finite"),
        ("disk_latency", -1.0, "must be >= 0"),
        ("round_cost", "fast", "must be a number"),
        ("message_cost", float("nan"), "must be finite"),
    ],
)
def test_bad_fields_are_named(field, value, message):
    kwargs = {"network_bandwidth": 1.0, "disk_bandwidth": 1.0, field: value}
    with pytest.raises(CostModelError, match=f"field '{field}' {message}"):
        CostModel(**kwargs)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_round_trip_through_json(name):
    cm = get_cost_model(name)
    assert cm.name == name
    assert CostModel.from_json(cm.to_json()) == cm
    assert cm.bandwidth == min(cm.network_bandwidth, cm.disk_bandwidth)


def test_cluster2004_uses_the_papers_numbers():
    cm = get_cost_model("cluster2004")
    assert cm.network_bandwidth == 1.28e9 / 8  # Myrinet 1.28 Gbps (Wu et al., sec. 1)
    assert cm.disk_bandwidth == 32.96e6 / 8  # IDE 32.96 Mbps (Wu et al., sec. 1)
    assert get_cost_model(None) == cm


def test_unknown_preset_and_fields():
    with pytest.raises(CostModelError, match="unknown cost preset 'fast'"):
        get_cost_model("fast")
    with pytest.raises(CostModelError, match=r"unknown cost-model field\(s\) \['speed'\]"):
        CostModel.from_dict({"network_bandwidth": 1.0, "disk_bandwidth": 1.0, "speed": 3})
    assert get_cost_model("modern").replace(round_cost=1.0).round_cost == 1.0
    with pytest.raises(CostModelError):
        get_cost_model("modern").replace(round_cost=-1.0)


def test_malformed_cost_model_input_is_named():
    with pytest.raises(CostModelError, match=r"lacks required field\(s\) \['disk_bandwidth'\]"):
        CostModel.from_dict({"network_bandwidth": 1.0})
    with pytest.raises(CostModelError, match="must be a mapping"):
        CostModel.from_json("[1, 2]")
    with pytest.raises(CostModelError, match="not valid JSON"):
        CostModel.from_json("{bandwidth: fast}")
