// Whole-run checkpoints ("cuts"): a consistent cut of the whole model at one clock boundary, on
// every server, coordinated by the scheduler (scheduler/checkpoints.h). A cut is a folder
// <checkpoint_dir>/clock-<C>/ holding each server's SST files (server/cut_file.h) and, written
// last by the scheduler, manifest.json: a folder without one is an incomplete cut and never
// read. This file is what the scheduler, the servers and `hetps launch --resume` share: where a
// cut lives, its manifest, and finding the newest complete one.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "durable.pb.h"

namespace hetps {

constexpr int kCutFormat = 1;      // of manifest.json
constexpr int kCutFileFormat = 1;  // of a server's SST files (server/cut_file.h)
constexpr char kManifestName[] = "manifest.json";

// <checkpoint_dir>/clock-<clock, 9 digits> (so the names sort by clock).
std::string CutDir(const std::string& checkpoint_dir, int64_t clock);

// Writes <cut_dir>/manifest.json (JSON of the proto) through a temporary file, synced and
// renamed, so a crash leaves either no manifest or a whole one.
Status WriteManifest(const std::string& cut_dir, const proto::CutManifest& manifest);
// Reads a cut's manifest; an error names the folder (absent: an incomplete cut or not a cut;
// damaged; a newer format).
StatusOr<proto::CutManifest> ReadManifest(const std::string& cut_dir);

// The complete cut with the highest clock under `checkpoint_dir` (its folder); NotFound naming
// the folder when there is none. `path` may also be a cut's own folder.
StatusOr<std::string> LatestCut(const std::string& path);

// Removes all but the newest `keep` complete cuts, and incomplete ones older than the newest
// complete cut (an interrupted attempt); keep <= 0 keeps everything. Returns how many folders
// it removed.
int PruneCuts(const std::string& checkpoint_dir, int keep);

}  // namespace hetps
