//===- Files.h - files written for the user ---------------------*- C++ -*-===//
//
// Everything Tessel writes on a user's request (dumps, -o, pictures) goes
// through here, so that a missing directory, a read-only one or a full disk
// is an error that names the file rather than a success message.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_RUNTIME_FILES_H
#define TESSEL_RUNTIME_FILES_H

#include <filesystem>
#include <string>
#include <string_view>

namespace tessel::rt {
/// Creates `dir` and its parents; throws tessel::Error saying why not.
void createDirectories(const std::filesystem::path &dir, std::string_view purpose);
/// Writes `bytes` to `file`, replacing it; throws tessel::Error naming the
/// file and the reason when it cannot be written completely.
void writeFile(const std::filesystem::path &file, std::string_view bytes);
/// Replaces `file` by `bytes` whole: written to a temporary beside it (named
/// after the process and a counter) and renamed over it, so that a reader in
/// another thread or process sees the old contents or the new, never part.
/// Returns "" on success, else why not (the temporary is removed).
std::string replaceFile(const std::filesystem::path &file, std::string_view bytes);
/// The whole of `file` in one read (the cache reads entries of hundreds of
/// kilobytes on every warm compile); false when it cannot be read.
bool readWholeFile(const std::filesystem::path &file, std::string &bytes);
} // namespace tessel::rt

#endif
