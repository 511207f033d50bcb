// The idempotency record of a scratch volume: a small JSON file, `.spoke-volume.json`, kept
// inside the volume's own directory on the hub. It makes CreateVolume idempotent across
// controller restarts (the directory and its record are the state; the controller keeps
// none that matters), protects pre-existing data (a directory without a record is never
// adopted unless empty, never deleted) and travels with the data when archived.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/volume.h"

namespace spoke::controller {

inline constexpr std::string_view kRecordFile = ".spoke-volume.json";

struct VolumeRecord {
  std::string name;       // the CSI volume name (the PV name under csi-provisioner)
  std::string volume_id;  // VolumeId::Encode()
  StringMap parameters;   // CanonicalParameters() of the request that created it
  int64_t capacity_bytes = 0;
  std::string created_at;  // UTC, RFC 3339

  std::string Encode() const;
  // kInvalidArgument when the text is not a record this version wrote.
  static Result<VolumeRecord> Decode(std::string_view json);
};

// The validated parameters in a canonical form, for "same name, same parameters?". The
// provisioner's csi.storage.k8s.io/* metadata is left out (it only feeds subDir, whose
// expansion is included as `path`), and hubTimeoutSeconds is included only when the
// StorageClass gave it (a changed controller default is not a different volume).
StringMap CanonicalParameters(const VolumeParams& params, const std::string& path,
                              bool explicit_hub_timeout);

}  // namespace spoke::controller
