import json
import time

import pytest

from cuda_agent.tasks import TaskError, load_dataset, load_file, load_task, load_tasks


def test_all_kernelbench_rows_load(kernelbench_jsonl):
    ts = load_tasks(kernelbench_jsonl)
    assert len(ts.tasks) == 270 and not ts.errors
    assert [len(ts.select(level=lv).tasks) for lv in (1, 2, 3, 4)] == [100, 100, 50, 20]
    t = ts.find("L1/19")
    assert t.name == "19_ReLU" and t.level == 1 and t.problem_id == 19
    assert ts.find("L2/1").name == "1_Conv2D_ReLU_BiasAdd"


def test_selection_by_id_and_pattern(kernelbench_jsonl):
    ts = load_tasks(kernelbench_jsonl)
    assert [t.problem_id for t in ts.select(level=1, ids=[3, 4]).tasks] == [3, 4]
    convs = ts.select(level=2, pattern="*conv3d*").tasks
    assert convs and all("conv3d" in t.name.lower() for t in convs)
    assert ts.select(pattern="softmax").tasks


def test_ambiguous_and_missing_names_say_what_to_do(kernelbench_jsonl):
    ts = load_tasks(kernelbench_jsonl)
    with pytest.raises(KeyError, match="L<level>/<id>"):
        ts.find("1")
    with pytest.raises(KeyError, match="tasks list"):
        ts.find("no_such_task")


def test_kernelbench_checkout_layout(tmp_path, kernelbench_jsonl):
    rows = [json.loads(line) for line in kernelbench_jsonl.read_text().splitlines()]
    for r in rows[:3] + rows[100:102]:
        d = tmp_path / "KernelBench" / f"level{r['level']}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{r['name']}.py").write_text(r["code"])
    ts = load_tasks(tmp_path)
    assert sorted((t.level, t.problem_id) for t in ts.tasks) == [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2)]


def test_parquet_dataset_roundtrip(tmp_path, kernelbench_jsonl):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in kernelbench_jsonl.read_text().splitlines()][:5]
    rows[0]["ops"] = "x"
    for r in rows[1:]:
        r["ops"] = None
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    ts = load_dataset(tmp_path / "d.parquet")
    assert len(ts.tasks) == 5 and ts.tasks[0].metadata["ops"] == "x"


def test_syntax_error_names_file_and_line(tmp_path):
    p = tmp_path / "bad.py"
    p.write_text("class Model:\n    def forward(self:\n")
    with pytest.raises(TaskError, match=r"bad.py: syntax error at line 2"):
        load_file(p)


@pytest.mark.parametrize("code,missing", [
    ("def get_inputs(): return []\ndef get_init_inputs(): return []\n", "class Model"),
    ("class Model:\n    def forward(self): pass\ndef get_init_inputs(): return []\n", "get_inputs()"),
    ("class Model:\n    def forward(self): pass\ndef get_inputs(): return []\n", "get_init_inputs()"),
    ("class Model:\n    pass\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n", "no forward"),
])
def test_missing_parts_are_named(tmp_path, code, missing):
    p = tmp_path / "t.py"
    p.write_text(code)
    with pytest.raises(TaskError, match=missing.replace("(", r"\(").replace(")", r"\)")):
        load_file(p)


def test_unreadable_and_non_python_files(tmp_path):
    with pytest.raises(TaskError, match="no such file"):
        load_file(tmp_path / "nope.py")
    b = tmp_path / "bin.py"
    b.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(TaskError, match="not UTF-8"):
        load_file(b)


def test_loading_never_runs_the_task(tmp_path):
    marker = tmp_path / "ran"
    p = tmp_path / "t.py"
    p.write_text(f"open({str(marker)!r}, 'w').write('x')\nclass Model:\n    def forward(self): pass\n"
                 "def get_inputs(): return []\ndef get_init_inputs(): return []\n")
    load_file(p)
    assert not marker.exists()


def test_dataset_reports_every_bad_row_and_keeps_good_ones(tmp_path, kernelbench_jsonl):
    good = kernelbench_jsonl.read_text().splitlines()[:3]
    bad = [json.dumps({"name": "broken_syntax", "code": "def ("}),
           "{not json",
           json.dumps({"name": "no_model", "code": "def get_inputs(): pass\ndef get_init_inputs(): pass"}),
           json.dumps({"level": 1, "code": "x"})]
    p = tmp_path / "mixed.jsonl"
    p.write_text("\n".join(good + bad) + "\n")
    ts = load_dataset(p)
    assert len(ts.tasks) == 3 and len(ts.errors) == 4
    text = "\n".join(map(str, ts.errors))
    assert "broken_syntax" in text and "no_model" in text and "not valid JSON" in text and "missing" in text


def test_bundled_examples_and_single_file_lookup():
    t = load_task("scale_bias_relu")
    assert t.name == "scale_bias_relu" and "relu" in t.code
    assert load_tasks("examples").tasks


def test_loading_kernelbench_is_fast(kernelbench_jsonl):
    t0 = time.perf_counter()
    load_tasks(kernelbench_jsonl)
    assert time.perf_counter() - t0 < 2.0
