#!/usr/bin/env python3
"""Reference rows for the Parquet reader (include/finetune/data/parquet_rows.h).

Usage: make_parquet_fixtures.py OUTDIR

Writes Parquet files with pyarrow (small row groups, so the reader streams across many of them)
and, for each NAME.parquet, NAME.jsonl: its rows as pyarrow reads them back (`Table.to_pylist()`)
and json.dumps writes them, after the conversions parquet_rows.h documents for values JSON has
no form for (bytes -> base64, maps -> objects or [key, value] pairs, NaN/inf -> null, timestamps
and dates -> Python's str()). tests/data/test_parquet_rows.cpp compares the C++ rows to these,
row by row and key order included.

  types            every supported type, nulls at every level, Unicode, 3 rows per row group
  alpaca, messages, sharegpt, content_parts   the dataset shapes, list<struct> columns
  hf_dataset       written by datasets.Dataset.to_parquet (its rows also checked against datasets')
  many_row_groups  200 row groups of 20 rows
  corrupt_tail     40 row groups of 100 rows whose last row group's page headers are overwritten
                   (corrupt_tail.json: the rows before it); the rows before it can be read
  big_rows         48 row groups of 1000 rows of 2 KB text (~96 MB decoded, a small file)
  unsupported_decimal, unsupported_nested, unsupported_zone   columns with no JSON form
"""
import base64
import datetime
import decimal
import json
import math
import os
import sys
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq


def reference_value(value, arrow_type):
    """A to_pylist() value of `arrow_type` as parquet_rows.h converts it."""
    if value is None:
        return None
    if pa.types.is_dictionary(arrow_type):  # to_pylist decodes dictionaries
        return reference_value(value, arrow_type.value_type)
    if (pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type)
            or pa.types.is_fixed_size_binary(arrow_type) or pa.types.is_binary_view(arrow_type)):
        return base64.b64encode(value).decode("ascii")
    if pa.types.is_floating(arrow_type):
        return float(value) if math.isfinite(value) else None
    if pa.types.is_timestamp(arrow_type) or pa.types.is_date(arrow_type):
        return str(value)
    if (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)
            or pa.types.is_fixed_size_list(arrow_type)):
        return [reference_value(item, arrow_type.value_type) for item in value]
    if pa.types.is_struct(arrow_type):
        return {arrow_type.field(i).name: reference_value(value[arrow_type.field(i).name], arrow_type.field(i).type)
                for i in range(arrow_type.num_fields)}
    if pa.types.is_map(arrow_type):  # to_pylist: a list of (key, value) tuples
        key_type = arrow_type.key_type
        if pa.types.is_dictionary(key_type):
            key_type = key_type.value_type
        if pa.types.is_string(key_type) or pa.types.is_large_string(key_type) or pa.types.is_string_view(key_type):
            pairs = {}
            for key, item in value:
                pairs[key] = reference_value(item, arrow_type.item_type)  # a repeated key: first place, last value
            return pairs
        return [[reference_value(key, arrow_type.key_type), reference_value(item, arrow_type.item_type)]
                for key, item in value]
    return value  # null, bool, integers, strings


def reference_rows(path):
    table = pq.read_table(path)  # the same Arrow reader, so the same types as the C++ side sees
    return [{field.name: reference_value(row[field.name], field.type) for field in table.schema}
            for row in table.to_pylist()]


def write(outdir, name, table, **options):
    path = os.path.join(outdir, name + ".parquet")
    pq.write_table(table, path, **options)
    with open(os.path.join(outdir, name + ".jsonl"), "w", encoding="utf-8") as out:
        for row in reference_rows(path):
            out.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
    return path


def types_table():
    n = 12
    def cycle(values):
        return [values[i % len(values)] for i in range(n)]
    utc = datetime.timezone.utc
    struct_type = pa.struct([("x", pa.int32()), ("y", pa.string()),
                             ("inner", pa.struct([("z", pa.list_(pa.float64()))]))])
    columns = {
        "null": pa.array([None] * n, pa.null()),
        "bool": pa.array(cycle([True, False, None]), pa.bool_()),
        "int8": pa.array(cycle([-128, 127, None, 0]), pa.int8()),
        "int16": pa.array(cycle([-32768, 32767, None]), pa.int16()),
        "int32": pa.array(cycle([-2**31, 2**31 - 1, None]), pa.int32()),
        "int64": pa.array(cycle([-2**63, 2**63 - 1, None, 7]), pa.int64()),
        "uint8": pa.array(cycle([0, 255, None]), pa.uint8()),
        "uint16": pa.array(cycle([65535, None, 1]), pa.uint16()),
        "uint32": pa.array(cycle([2**32 - 1, None, 1]), pa.uint32()),
        "uint64": pa.array(cycle([2**64 - 1, 2**63, None, 5]), pa.uint64()),
        "float": pa.array(cycle([1.1, -0.0, float("nan"), float("inf"), None, 3.4e38]), pa.float32()),
        "double": pa.array(cycle([0.1, 1e-300, float("-inf"), None, 2.0, 1e308]), pa.float64()),
        "string": pa.array(cycle(["", "plain", "Ünïcödé ✓ 日本語 😀", None, "quote\" back\\ nl\n tab\t nul\x00"]),
                           pa.string()),
        "large_string": pa.array(cycle(["large", None, "é"]), pa.large_string()),
        "string_view": pa.array(cycle(["view", "a longer string than twelve bytes", None]), pa.string_view()),
        "binary": pa.array(cycle([b"", b"\x00\x01\xff", None, b"abcd"]), pa.binary()),
        "large_binary": pa.array(cycle([b"x", None]), pa.large_binary()),
        "fixed_binary": pa.array(cycle([b"abc", None, b"\xff\xfe\xfd"]), pa.binary(3)),
        "binary_view": pa.array(cycle([b"bv", None, b"0123456789abcdef"]), pa.binary_view()),
        "list": pa.array(cycle([[1, 2, 3], [], None, [None, 4]]), pa.list_(pa.int64())),
        "large_list": pa.array(cycle([["a"], None, [None, "b"]]), pa.large_list(pa.string())),
        # No null list here: Arrow < 26 cannot read one back ("Expected all lists to be of size=2").
        "fixed_list": pa.array(cycle([[1, 2], [None, 3]]), pa.list_(pa.int16(), 2)),
        "nested_list": pa.array(cycle([[[1], [], None], None, [[2, 3]]]), pa.list_(pa.list_(pa.int32()))),
        "struct": pa.array(cycle([{"x": 1, "y": "a", "inner": {"z": [0.5]}}, None,
                                  {"x": None, "y": None, "inner": None}, {"x": 2, "y": "b", "inner": {"z": None}}]),
                           struct_type),
        "map": pa.array(cycle([[("a", 1), ("b", None)], [], None, [("k", 2), ("k", 3)]]),
                        pa.map_(pa.string(), pa.int64())),
        "int_map": pa.array(cycle([[(1, "one"), (2, None)], None, []]), pa.map_(pa.int32(), pa.string())),
        "dictionary": pa.array(cycle(["red", "green", None, "red", "blue"])).dictionary_encode(),
        "timestamp_s": pa.array(cycle([0, -1, 1700000000, None]), pa.timestamp("s")),
        "timestamp_ms": pa.array(cycle([1700000000123, -1, None]), pa.timestamp("ms")),
        "timestamp_us_utc": pa.array(cycle([datetime.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=utc),
                                            datetime.datetime(1969, 12, 31, 23, 59, 59, tzinfo=utc), None]),
                                     pa.timestamp("us", tz="UTC")),
        "timestamp_ns": pa.array(cycle([1, 1500, -1, 1700000000000000000, None]), pa.timestamp("ns")),
        "timestamp_offset": pa.array(cycle([0, 1700000000000, -1, None]), pa.timestamp("ms", tz="+05:30")),
        "timestamp_negative_offset": pa.array(cycle([0, 1, None]), pa.timestamp("ms", tz="-03:00")),
        "date32": pa.array(cycle([0, 19000, -719162, 2932896, None]), pa.date32()),
        "date64": pa.array(cycle([86400000 * 19000, None]), pa.date64()),
        "messages": pa.array(cycle([[{"role": "user", "content": "q"}, {"role": "assistant", "content": None}],
                                    [None], None, []]),
                             pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
    }
    return pa.table(columns)


def corrupt_last_row_group(path):
    """Overwrites the page headers of every column chunk of the last row group with 0xFF bytes."""
    metadata = pq.ParquetFile(path).metadata
    last = metadata.row_group(metadata.num_row_groups - 1)
    with open(path, "r+b") as f:
        for c in range(last.num_columns):
            f.seek(last.column(c).data_page_offset)
            f.write(b"\xff" * 16)
    try:
        pq.read_table(path)
    except Exception:  # noqa: BLE001 - any failure is what we want
        return metadata.num_rows - last.num_rows
    sys.exit(f"{path}: still readable after corrupting its last row group")


def write_dataset_shapes(outdir):
    write(outdir, "alpaca", pa.table({
        "instruction": ["Say hi", "Add the numbers", "Translate to French", "Überprüfe ✓"],
        "input": ["", "1 2", "cat", None],
        "output": ["hi", "3", "chat", "geprüft 😀"]}), row_group_size=2)
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    write(outdir, "messages", pa.table({"messages": pa.array([
        [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"},
         {"role": "assistant", "content": "4"}],
        [{"role": "user", "content": "héllo"}, {"role": "assistant", "content": "👋"},
         {"role": "user", "content": "again"}, {"role": "assistant", "content": "hi"}],
        [{"role": "user", "content": None}], [], None], pa.list_(message))}), row_group_size=2)
    turn = pa.struct([("from", pa.string()), ("value", pa.string())])
    write(outdir, "sharegpt", pa.table({
        "id": ["a", "b", "c"],
        "conversations": pa.array([
            [{"from": "system", "value": "s"}, {"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}],
            [{"from": "human", "value": "日本"}, {"from": "gpt", "value": "ja"}], [None]], pa.list_(turn))}),
        row_group_size=1)
    part = pa.struct([("type", pa.string()), ("text", pa.string())])
    write(outdir, "content_parts", pa.table({"messages": pa.array([
        [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, {"type": "image", "text": None}]},
         {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]}],
        [{"role": "user", "content": []}, {"role": "assistant", "content": None}],
        [{"role": "user", "content": [None]}]],
        pa.list_(pa.struct([("role", pa.string()), ("content", pa.list_(part))])))}), row_group_size=2)


def write_hf_dataset(outdir):
    try:
        import datasets  # noqa: PLC0415 - optional: without it only this fixture is missing
    except ImportError:
        # Its C++ test then fails on the missing fixture; the other fixtures still serve theirs.
        print("hf_dataset.parquet not written: this Python has no `datasets` (setup.sh pins datasets==5.2.0)",
              file=sys.stderr)
        return
    features = datasets.Features({
        "messages": [{"role": datasets.Value("string"), "content": datasets.Value("string")}],
        "label": datasets.ClassLabel(names=["bad", "good"]),
        "score": datasets.Value("float32"),
        "tags": datasets.Sequence(datasets.Value("string")),
        "meta": {"source": datasets.Value("string"), "turns": datasets.Value("int64")}})
    hf_rows = {
        "messages": [[{"role": "user", "content": f"question {i} ✓"}, {"role": "assistant", "content": f"answer {i}"}]
                     for i in range(25)],
        "label": [i % 2 for i in range(25)],
        "score": [i / 4 for i in range(25)],
        "tags": [["t"] * (i % 3) for i in range(25)],
        "meta": [{"source": "web" if i % 2 else None, "turns": i} for i in range(25)]}
    hf_dataset = datasets.Dataset.from_dict(hf_rows, features=features)
    hf_path = os.path.join(outdir, "hf_dataset.parquet")
    hf_dataset.to_parquet(hf_path, batch_size=10)
    hf_reference = reference_rows(hf_path)
    with tempfile.TemporaryDirectory() as cache_dir:  # datasets caches what it loads; not in ~/.cache
        hf_loaded = [dict(row) for row in datasets.Dataset.from_parquet(hf_path, cache_dir=cache_dir)]
    if hf_reference != hf_loaded:
        sys.exit("hf_dataset: pyarrow's rows differ from datasets' rows")
    with open(os.path.join(outdir, "hf_dataset.jsonl"), "w", encoding="utf-8") as out:
        for row in hf_reference:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_streaming_fixtures(outdir):
    write(outdir, "many_row_groups", pa.table({
        "index": list(range(4000)), "text": [f"row {i} ✓" for i in range(4000)]}), row_group_size=20)

    corrupt = write(outdir, "corrupt_tail", pa.table({
        "index": list(range(4000)), "text": [f"row {i}" for i in range(4000)]}),
        row_group_size=100, use_dictionary=False, compression="none")
    with open(os.path.join(outdir, "corrupt_tail.json"), "w") as out:
        json.dump({"rows_before_corruption": corrupt_last_row_group(corrupt)}, out)

    # Text that snappy compresses well: a small file that decodes to ~96 MB.
    rows = 48 * 1000
    pq.write_table(pa.table({"index": list(range(rows)),
                             "text": [f"{i:08d}" + "lorem ipsum " * 166 for i in range(rows)]}),
                   os.path.join(outdir, "big_rows.parquet"), row_group_size=1000, use_dictionary=False,
                   compression="snappy")


def write_unsupported(outdir):
    pq.write_table(pa.table({"ok": [1, 2], "price": pa.array([decimal.Decimal("1.25"), None], pa.decimal128(10, 2))}),
                   os.path.join(outdir, "unsupported_decimal.parquet"))
    pq.write_table(pa.table({"meta": pa.array([{"name": "a", "half": 1.5}],
                                              pa.struct([("name", pa.string()), ("half", pa.float16())]))}),
                   os.path.join(outdir, "unsupported_nested.parquet"))
    pq.write_table(pa.table({"when": pa.array([0], pa.timestamp("ms", tz="America/New_York"))}),
                   os.path.join(outdir, "unsupported_zone.parquet"))


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    write(outdir, "types", types_table(), row_group_size=3)
    write_dataset_shapes(outdir)
    write_hf_dataset(outdir)
    write_streaming_fixtures(outdir)
    write_unsupported(outdir)


if __name__ == "__main__":
    main()
