#!/usr/bin/env bash
# The library as C++ users take it: `cmake --install` into a fresh prefix, then
# projects of their own built with find_package(Sluice) and run:
#   examples/custom_source  a source of its own on the SPI (Sluice::core), consumed to
#                           the last message;
#   examples/installed      SQS services (Sluice::sqs) run against the emulator,
#                           linking no rabbitmq-c: publish and receive, and a handler
#                           that publishes (relay);
#   the whole library       (Sluice::sluice) with the RabbitMQ consumer example;
#   examples/distribution   a `sluice` of its own (sluice_add_distribution): every
#                           built-in driver plus a source and a sink of the example's,
#                           run end to end.
# Usage: check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build_dir=$1
source_dir=$2
work=$(mktemp -d)
source "$source_dir/scripts/lib/emulator.sh"
cleanup() {
  stop_emulator
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "check_install: $*" >&2
  exit 1
}
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
# Nothing installed may point back into the source or build trees.
if grep -rlF -e "$source_dir" -e "$build_dir" "$work/prefix/lib/cmake"; then
  fail "the installed package refers to the build machine's trees"
fi
build() {  # build NAME SOURCE_DIR
  cmake -S "$2" -B "$work/$1" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release \
    >"$work/$1.log" 2>&1 || { cat "$work/$1.log" >&2; fail "$1: configuring failed"; }
  cmake --build "$work/$1" -j 2 >>"$work/$1.log" 2>&1 || { cat "$work/$1.log" >&2; fail "$1: building failed"; }
}
links_no_rabbitmq() {
  if readelf -d "$1" | grep -q 'librabbitmq'; then fail "$1 links rabbitmq-c"; fi
}

# 1. A source outside the tree: only the installed headers (sluice/spi/) and Sluice::core.
build custom "$source_dir/examples/custom_source"
out=$("$work/custom/custom_source" 3000) || fail "custom_source failed: $out"
echo "$out"
[[ "$out" == *"acked 3000 of 3000 (3000 acks, 30 retried"* ]] || fail "custom_source: $out"
links_no_rabbitmq "$work/custom/custom_source"
# (OpenSSL is the core's too since traces: the OTLP exporter speaks https.)
if readelf -d "$work/custom/custom_source" | grep -q 'libexpat\|libsimdjson\|libcurses\|libncurses'; then
  fail "custom_source (Sluice::core) links an AWS layer's or the binary's library"
fi

# 2. The SQS component alone, run against the emulator.
build sqs "$source_dir/examples/installed"
links_no_rabbitmq "$work/sqs/publish_receive"
links_no_rabbitmq "$work/sqs/inventory_consumer"
start_emulator
trap cleanup EXIT  # start_emulator set its own
endpoint="http://127.0.0.1:$EMULATOR_PORT"
# The emulator accepts any signature; these are placeholders, not secrets.
export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_REGION=us-east-1
export AWS_ENDPOINT_URL_SQS="$endpoint" AWS_EC2_METADATA_DISABLED=true
"$work/prefix/bin/sluice" queue create --name installed --endpoint-url "$endpoint" >/dev/null
out=$("$work/sqs/publish_receive" "$endpoint/000000000000/installed" 2>&1) ||
  fail "publish_receive failed: $out"
echo "$out"
[[ "$out" == *'received '*'"skuId":"SKU-1"'* ]] || fail "publish_receive received nothing: $out"
# A handler that publishes: 50 events relayed from one queue to another, each acked
# once the second queue has it; then the first is empty and the second holds 50.
"$work/prefix/bin/sluice" queue create --name relay-from --endpoint-url "$endpoint" >/dev/null
"$work/prefix/bin/sluice" queue create --name relay-to --endpoint-url "$endpoint" >/dev/null
"$work/prefix/bin/sluice" publish --queue-url "$endpoint/000000000000/relay-from" \
  --endpoint-url "$endpoint" --generate 50 >/dev/null
out=$("$work/sqs/relay" "$endpoint/000000000000/relay-from" "$endpoint/000000000000/relay-to" 50 \
  2>"$work/relay.log") || { cat "$work/relay.log" >&2; fail "relay failed: $out"; }
echo "$out"
[[ "$(tail -1 <<<"$out")" == "relayed 50 of 50" ]] || fail "relay: $out"
stats() {
  "$work/prefix/bin/sluice" queue stats --queue-url "$endpoint/000000000000/$1" \
    --endpoint-url "$endpoint"
}
stats relay-to | grep -qx 'ApproximateNumberOfMessages 50' ||
  fail "relay-to does not hold the 50 relayed: $(stats relay-to)"
stats relay-from | grep -qx 'ApproximateNumberOfMessages 0' ||
  fail "relay-from still holds messages: $(stats relay-from)"

# Components: an optional one that does not exist is left out; a required one fails
# the search, naming it.
configure_only() {  # NAME FIND_PACKAGE_ARGUMENTS CHECK
  mkdir -p "$work/$1-src"
  printf 'cmake_minimum_required(VERSION 3.25)\nproject(%s LANGUAGES CXX)\nfind_package(Sluice 0.2 %s)\n%s\n' \
    "$1" "$2" "$3" >"$work/$1-src/CMakeLists.txt"
  cmake -S "$work/$1-src" -B "$work/$1" -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/$1.log" 2>&1
}
configure_only optional "REQUIRED COMPONENTS core OPTIONAL_COMPONENTS nosuch" \
  'if(Sluice_nosuch_FOUND OR NOT TARGET Sluice::core OR TARGET Sluice::sqs OR TARGET Sluice::sluice)
  message(FATAL_ERROR "wrong targets")
endif()' || { cat "$work/optional.log" >&2; fail "an unknown optional component failed the search"; }
if configure_only required "REQUIRED COMPONENTS nosuch" ""; then
  fail "an unknown required component was accepted"
fi
grep -q "Sluice has no component 'nosuch'" "$work/required.log" ||
  { cat "$work/required.log" >&2; fail "the unknown component is not named"; }

# 3. The whole library.
mkdir -p "$work/all-src"
cat >"$work/all-src/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(all LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(Sluice 0.2 REQUIRED)
add_executable(consume_rabbitmq $source_dir/examples/consume_rabbitmq.cpp)
target_link_libraries(consume_rabbitmq PRIVATE Sluice::sluice)
CMAKE
build all "$work/all-src"
set +e
"$work/all/consume_rabbitmq" 2>"$work/stderr"
code=$?
set -e
if [[ $code != 2 ]] || ! grep -q "usage:" "$work/stderr"; then
  cat "$work/stderr" >&2
  fail "the RabbitMQ consumer built against Sluice::sluice did not run (exit $code)"
fi
"$work/prefix/bin/sluice" --help >/dev/null

# 4. Your own sluice: the example's drivers (source.counter, sink.ndjson) beside the
# built-in ones, from the installed package alone.
build dist "$source_dir/examples/distribution"
my_sluice="$work/dist/my-sluice"
cd "$work"
config="$source_dir/examples/distribution/pipeline.yaml"
summary() {  # LABEL: the count on that line of the run's summary (LABEL an extended regex)
  sed -nE "s/^  $1 +([0-9]+).*/\\1/p" "$work/run.log"
}
run_pipeline() {
  "$my_sluice" run --config "$config" --until-drained >"$work/run.log" 2>&1 ||
    { tail -20 "$work/run.log" >&2; fail "my-sluice run failed"; }
}
run_pipeline
[[ "$(summary received)" == 2000 && "$(summary 'written \(new\)')" == 1980 &&
   "$(summary rejected)" == 20 ]] || { tail -12 "$work/run.log" >&2; fail "my-sluice: wrong first run"; }
records="$work/my-sluice-out/records.ndjson"
[[ "$(wc -l <"$records")" == 1980 ]] || fail "my-sluice: $(wc -l <"$records") records written, expected 1980"
[[ "$(grep -o '"documentHash":"[^"]*"' "$records" | sort -u | wc -l)" == 1980 ]] ||
  fail "my-sluice: the records' hashes are not distinct"
[[ "$(wc -l <"$work/my-sluice-out/rejects.ndjson")" == 20 ]] || fail "my-sluice: not 20 rejects"
# Again: every record is a duplicate, and no reject row is added.
run_pipeline
[[ "$(summary 'written \(new\)')" == 0 && "$(summary duplicates)" == 1980 ]] ||
  { tail -12 "$work/run.log" >&2; fail "my-sluice: the second run wrote records again"; }
[[ "$(wc -l <"$records")" == 1980 && "$(wc -l <"$work/my-sluice-out/rejects.ndjson")" == 20 ]] ||
  fail "my-sluice: the second run added lines"
# The rejects verbs read the example sink's table.
[[ "$("$my_sluice" rejects list --config "$config" | grep -c $'\tmalformed\t')" == 20 ]] ||
  fail "my-sluice rejects list does not show the 20 rejects"
# Its keys are documented with the built-in ones'; its bad keys are refused, named.
docs=$("$my_sluice" config docs)
for key in source.counter.count sink.ndjson.directory source.sqs.queue_url sink.postgres.dsn; do
  grep -q "\`$key\`" <<<"$docs" || fail "my-sluice config docs lacks $key"
done
refused() {  # EDIT EXPECTED: the edited file is refused (exit 2) with EXPECTED in the error
  sed "$1" "$config" >"$work/bad.yaml"
  set +e
  "$my_sluice" config check --config "$work/bad.yaml" >"$work/bad.log" 2>&1
  local code=$?
  set -e
  [[ $code == 2 ]] && grep -qF "$2" "$work/bad.log" ||
    { cat "$work/bad.log" >&2; fail "my-sluice: '$1' was not refused with '$2' (exit $code)"; }
}
refused 's/count: 2000/count: -3/' "source.counter.count: got '-3', expected an integer"
refused 's/directory: my-sluice-out/directry: x/' "unknown key sink.ndjson.directry; did you mean sink.ndjson.directory?"
refused 's/directory: my-sluice-out/directory: ""/' "sink.ndjson.directory: got '', expected a folder"
refused 's/type: ndjson/type: sqlite/' "sink.ndjson"
refused 's|  type: ndjson|  type: ndjson\n  table: ../escaped|' "sink.table: got '../escaped', expected a table name"
# Two drivers of one kind with one name: the binary refuses to start, naming it.
mkdir -p "$work/dup-src"
cp "$source_dir"/examples/distribution/{CMakeLists.txt,counter_source.cpp,ndjson_sink.cpp} "$work/dup-src/"
sed -i 's/return "ndjson";/return "sqlite";/' "$work/dup-src/ndjson_sink.cpp"
build dup "$work/dup-src"
set +e
"$work/dup/my-sluice" config check --config "$config" >"$work/dup.log" 2>&1
code=$?
set -e
[[ $code == 2 ]] && grep -qF "two sink drivers are named 'sqlite'" "$work/dup.log" ||
  { cat "$work/dup.log" >&2; fail "a distribution with two 'sqlite' sinks was not refused (exit $code)"; }
echo "check_install: Sluice::core (a source of its own), Sluice::sqs (no rabbitmq-c), Sluice::sluice and a distribution of its own drivers build and run"
