// File helpers: whole-file reads with clear errors, and the atomic write every
// persistent artifact (checkpoints, exported models, reports) goes through.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace mpc {

absl::StatusOr<std::string> ReadFileToString(const std::string& path);
// Writes to "<path>.tmp.<pid>", fsyncs it, renames it over `path`, fsyncs the directory.
// On any failure the previous file at `path` is untouched and the temp file removed.
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents);
// Joins a relative path onto base_dir; absolute paths are returned unchanged.
std::string ResolvePath(const std::string& base_dir, const std::string& path);

}  // namespace mpc
