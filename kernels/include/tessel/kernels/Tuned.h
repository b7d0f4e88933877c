//===- Tuned.h - configurations recorded by tessel tune ---------*- C++ -*-===//
//
// `tessel tune` records the fastest configuration of a kernel per device
// and shape bucket as a small text file under the kernel cache's directory
// (tune/KERNEL/DEVICE/BUCKET.txt); the tool's `config=auto` and the library
// calls (tessel::gemm) read them. A bucket names the problem (types,
// transposes as they are) and its extents rounded up to powers of two.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_TUNED_H
#define TESSEL_KERNELS_TUNED_H

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessel::kernels {

using TunedSettings = std::map<std::string, std::string>;

/// "in=bf16,out=f16,M=8192,..." from the problem's settings as they are
/// and its extents rounded up to powers of two.
std::string tunedBucket(const std::vector<std::pair<std::string, std::string>> &problem,
                        const std::vector<std::pair<std::string, int64_t>> &extents);

/// Where the record for `kernel` on `device` (a device name, or an arch
/// for records any device of that target may use) and `bucket` lives;
/// empty when the cache is off.
std::filesystem::path tunedFile(const std::string &kernel, const std::string &device,
                                const std::string &bucket);
std::optional<TunedSettings> findTuned(const std::string &kernel, const std::string &device,
                                       const std::string &bucket);
/// The record `tessel tune` left for `kernel` on the GPU `device` (by its
/// name), else for the target `arch`, and whose it is ("" when none);
/// looked for once per process, cache directory, device and bucket, so that
/// a library call does not touch the file system every time.
std::pair<std::optional<TunedSettings>, std::string>
tunedRecord(const std::string &kernel, int device, const std::string &arch,
            const std::string &bucket);
/// Writes the record whole (by rename). Throws tessel::Error naming the
/// file when it cannot.
void recordTuned(const std::string &kernel, const std::string &device, const std::string &bucket,
                 const TunedSettings &config);

} // namespace tessel::kernels

#endif
