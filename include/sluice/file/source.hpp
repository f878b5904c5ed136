#pragma once
// JSON lines from files as a container's source: a file, a glob, or standard input,
// read as a queue whose lease is the file and whose ack is a checkpoint.
//
//   sluice::Container container(options, sluice::make_file_source({.path = "events/*.jsonl"}),
//                               handler);
//
// Each non-blank line is one message (its id "PATH:LINE"). Files of a glob are read
// one after another in name order. What has been acked is kept as a checkpoint: per
// file, the end of the longest run of lines from its start that are all acked (or
// rejected), written atomically (a temporary file renamed over it) every
// checkpoint_interval and at stop. A restart resumes there, so after a crash (kill -9)
// only lines after the checkpoint are read again; a sink that dedupes by content
// hash stores them once. Retries and releases are delivered again from memory after
// their backoff; a reject marks the line done (the rejects table keeps it). A last
// line without its newline is waited for (a writer still appending), then taken as
// it is once the file has not grown for partial_line_wait. Standard input ("-") has
// no checkpoint: it cannot be read again. Files are opened one at a time as reading
// reaches them. A file that is not the one its checkpoint names (another inode), or is
// shorter than it, is read from its start; so is one truncated or replaced while it is
// read (its lines not yet acked then are not read again: the old file is gone).
//
// With the container's PositionStore, the writers of a sink that saves positions with
// its records (`sluice run` into PostgreSQL or SQLite) also commit the files' position
// in each batch's transaction (spi::BatchPositions), as a checkpoint's text under the
// key "file checkpoint=CHECKPOINT pipeline=CONTAINER#rows"; a restart takes whichever
// of it and the checkpoint file was saved later. So after a crash nothing written is
// read again when lines reach the writers in order. To read the files again from their
// start, delete the checkpoint file and that row.

#include <chrono>
#include <cstddef>
#include <string>

#include "sluice/source.hpp"

namespace sluice {

struct FileSourceOptions {
  std::string path;  // a file, a glob (*, ?, [...]) or "-" for standard input
  // Where the acked prefix of each file is kept; empty: PATH.checkpoint for one file,
  // required for a glob, none for standard input.
  std::string checkpoint;
  bool follow = false;  // at the end, wait for more lines and (a glob) new files
  int max_batch = 100;  // lines per receive
  std::chrono::milliseconds poll_interval{200};       // how often the end is looked past
  std::chrono::milliseconds partial_line_wait{5000};  // see above
  std::chrono::milliseconds checkpoint_interval{500};
  // A longer line is never held whole: it is delivered as unusable (reason
  // line_too_long) with its first kilobyte.
  std::size_t max_line_bytes = 1 << 20;
};

// Throws std::invalid_argument naming the option, its value and what was expected.
void validate(const FileSourceOptions& options);

// Validates the options; the files are opened when the container starts.
SourceFactory make_file_source(FileSourceOptions options);

}  // namespace sluice
