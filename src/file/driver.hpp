#pragma once
// JSON-lines files as a source of `sluice run` (backfills, replays of a rejects
// export): the section source.file.* (driver/source_driver.hpp).

#include <memory>

#include "file/file_source.hpp"
#include "sluice/driver/source_driver.hpp"

namespace sluice::file {

struct FileSettings : driver::SourceSettings {
  FileSourceOptions source;
  std::shared_ptr<Progress> progress = std::make_shared<Progress>();  // source -> probe
};

const driver::SourceDriver& file_source_driver();

}  // namespace sluice::file
