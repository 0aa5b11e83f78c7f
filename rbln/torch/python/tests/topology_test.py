"""Logical devices over physical NPUs: profiles, visibility, RSD groups."""
# spec: A1, A2, A3, A4, A5, A6

import sys

import pytest

import rbln_test_util


def run(code, **env):
    r = rbln_test_util.run_python("import torch\n" + code, env)
    return r


def test_spec_a5_atom_pairs():
    # spec: A5 -- 4 ATOM NPUs grouped by 2: device_count 2, physical 4.
    r = run(
        "print(torch.rbln.device_count(), torch.rbln.physical_device_count())\n"
        "print(torch.rbln.get_device_properties(1).npus, torch.rbln.get_device_properties(1).npu_count)\n",
        RBLN_SIM_PROFILE="atom", RBLN_SIM_NPUS="4", RBLN_NPUS_PER_DEVICE="2",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["2 4", "[2, 3] 2"]


def test_device_map_wins_and_visible_list_is_relative():
    # spec: A3, A4 -- group indices refer to RBLN_VISIBLE_DEVICES' list.
    r = run(
        "print(torch.rbln.device_count(), torch.rbln.physical_device_count())\n"
        "print(torch.rbln.device_summary())\n",
        RBLN_SIM_PROFILE="atom", RBLN_SIM_NPUS="8", RBLN_VISIBLE_DEVICES="7,6,5,4,3,2",
        RBLN_DEVICE_MAP="[0,1],[2,3,4,5]", RBLN_NPUS_PER_DEVICE="2",
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert lines[0] == "2 6"
    assert lines[3].split()[:3] == ["rbln:0", "0,1", "7,6"]
    assert lines[4].split()[:3] == ["rbln:1", "2,3,4,5", "5,4,3,2"]
    assert "RBLN_NPUS_PER_DEVICE" in r.stdout  # Reported as ignored.


def test_rebel100_rejects_group_variables():
    # spec: A4
    r = run("torch.ones(1, device='rbln')\n", RBLN_NPUS_PER_DEVICE="2")
    assert r.returncode != 0
    assert "RBLN_NPUS_PER_DEVICE" in r.stderr and "rbln-ccl" in r.stderr


def test_rebel100_card_is_one_logical_device_with_four_chiplets():
    # spec: A1, A2
    r = run(
        "p = torch.rbln.get_device_properties(0)\n"
        "print(torch.rbln.device_count(), p.num_chiplet, p.npu_count, p.total_memory == 4 * p.memory_per_chiplet)\n"
        "print(len(torch.rbln.mem_get_info_per_chiplet(1)))\n",
        RBLN_SIM_NPUS="2",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["2 4 1 True", "4"]


def test_deprecated_alias_warns():
    r = run("print(torch.rbln.physical_device_count()); torch.ones(1, device='rbln')\n",
            RBLN_SIM_NPUS="4", RBLN_DEVICES="1,2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "2"
    assert "RBLN_DEVICES" in r.stderr and "RBLN_VISIBLE_DEVICES" in r.stderr


def test_malformed_map_names_the_variable():
    r = run("torch.rbln.device_count()\n", RBLN_SIM_PROFILE="atom", RBLN_SIM_NPUS="4",
            RBLN_DEVICE_MAP="[0,1][2,3]")
    assert r.returncode != 0
    assert "RBLN_DEVICE_MAP has invalid value '[0,1][2,3]'" in r.stderr


def test_plan_then_commit_ignores_later_changes():
    # spec: A6 -- queries plan; the first allocation commits; later changes
    # to the variables are ignored.
    r = run(
        "import os\n"
        "print(torch.rbln.device_count(), torch.rbln.is_initialized())\n"
        "os.environ['RBLN_NPUS_PER_DEVICE'] = '1'\n"
        "print(torch.rbln.device_count())\n"
        "x = torch.ones(1, device='rbln')\n"
        "os.environ['RBLN_NPUS_PER_DEVICE'] = '4'\n"
        "print(torch.rbln.device_count(), torch.rbln.is_initialized())\n",
        RBLN_SIM_PROFILE="atom", RBLN_SIM_NPUS="4", RBLN_NPUS_PER_DEVICE="2",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["2 False", "4", "4 True"]


def test_eager_allocations_land_on_the_devices_first_npu():
    # spec: A7 (eager path uses one NPU of the group)
    r = run(
        "x = torch.ones(64, dtype=torch.float16, device='rbln:1'); y = x + x\n"
        "print(y.device, [r[:2] for r in torch.rbln.mem_get_info_per_chiplet(1) if r[2] < r[3]])\n",
        RBLN_SIM_PROFILE="atom", RBLN_SIM_NPUS="4", RBLN_NPUS_PER_DEVICE="2",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "rbln:1 [(2, 0)]"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
