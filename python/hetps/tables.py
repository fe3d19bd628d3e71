"""Reading a sparse table's exports for serving (docs/tables.md).

`hetps ctl export --table=NAME --out=DIR [--full]` writes DIR/MANIFEST.json and one file per
bucket of the table. A serving copy applies each export in order:

    copy = hetps.tables.TableCopy()
    copy.apply("/exports/emb-001")        # a full export, or the first one
    copy.apply("/exports/emb-002")        # a delta: tombstones removed, rows upserted
    copy.rows[key]                        # a float32 row of the table's dim

Applying an export twice changes nothing; after a skipped one, apply a full export.
"""
import json
import os

import numpy as np

_MAGIC = b"HETPSEXP"
_HEADER = np.dtype([("magic", "S8"), ("format", "<u4"), ("dim", "<u4"), ("bucket", "<u4"),
                    ("buckets", "<u4"), ("full", "<u4"), ("pad", "<u4"),
                    ("tombstones", "<u8"), ("rows", "<u8")])


def read_manifest(path):
    """The export's MANIFEST.json as a dict (raises FileNotFoundError for an incomplete one)."""
    with open(os.path.join(path, "MANIFEST.json")) as f:
        return json.load(f)


def read_bucket(path):
    """One bucket's file: (header, tombstone keys, row keys, rows[n, dim]) as numpy arrays."""
    data = np.fromfile(path, dtype=np.uint8)
    if data.size < _HEADER.itemsize:
        raise ValueError(f"{path}: {data.size} bytes, shorter than an export header")
    header = data[:_HEADER.itemsize].view(_HEADER)[0]
    if header["magic"] != _MAGIC or header["format"] != 1:
        raise ValueError(f"{path}: not a hetps export file of format 1")
    dim, tombs, rows = int(header["dim"]), int(header["tombstones"]), int(header["rows"])
    want = _HEADER.itemsize + 8 * tombs + rows * (8 + 4 * dim)
    if data.size != want:
        raise ValueError(f"{path}: {data.size} bytes, its header says {want}")
    body = data[_HEADER.itemsize:]
    tombstones = body[:8 * tombs].view("<u8")
    records = body[8 * tombs:].view(np.dtype([("key", "<u8"), ("row", "<f4", (dim,))]))
    return header, tombstones, records["key"], records["row"]


class TableCopy:
    """A serving copy of one table, built from its exports (rows: key -> float32 row)."""

    def __init__(self):
        self.table = None
        self.dim = None
        self._buckets = {}  # bucket -> {key: row}: a full file replaces its bucket

    @property
    def rows(self):
        merged = {}
        for rows in self._buckets.values():
            merged.update(rows)
        return merged

    def __len__(self):
        return sum(len(rows) for rows in self._buckets.values())

    def apply(self, path):
        """Applies the export in `path` (a dir with MANIFEST.json); returns its manifest."""
        manifest = read_manifest(path)
        if self.table is not None and manifest["table"] != self.table:
            raise ValueError(f"{path} exports table {manifest['table']!r}, not {self.table!r}")
        self.table, self.dim = manifest["table"], int(manifest["dim"])
        for f in manifest.get("files", []):
            header, tombstones, keys, rows = read_bucket(os.path.join(path, f["file"]))
            bucket = int(header["bucket"])
            held = {} if header["full"] else self._buckets.get(bucket, {})
            for key in tombstones.tolist():
                held.pop(key, None)
            for key, row in zip(keys.tolist(), rows):
                held[key] = row.copy()
            self._buckets[bucket] = held
        return manifest
