#include "cli/top.hpp"

#include <curses.h>
#include <unistd.h>

#include <chrono>
#include <clocale>
#include <csignal>
#include <cstring>
#include <ctime>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include "common/redact.hpp"
#include "config/config.hpp"
#include "observe/http_get.hpp"
#include "observe/metrics.hpp"

namespace sluice::app {

namespace {

double rate(const Scrape& previous, const Scrape& current, const std::string& name) {
  const double dt = current.at_s - previous.at_s;
  if (dt <= 0) return 0;
  return std::max(0.0, (current.sum(name) - previous.sum(name)) / dt);
}

double gauge(const Scrape& s, const std::string& name) {
  const auto it = s.samples.find(name);
  return it == s.samples.end() || it->second.empty() ? NAN : s.sum(name);
}

PipelineFigures::Latency latency(const Scrape& previous, const Scrape& current,
                                 const std::string& base) {
  const auto h = histogram_between(previous, current, base);
  if (h.sample_count == 0) return {};
  return {histogram_quantile(h, 0.5), histogram_quantile(h, 0.99)};
}

// 1234 -> "1,234" (plain lines: "1234"); fractions under 10 keep one decimal.
std::string figure(double v, bool grouped = true) {
  if (std::isnan(v)) return "-";
  if (std::abs(v) < 10 && v != std::floor(v)) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.1f", v);
    return buffer;
  }
  std::string digits = std::to_string(static_cast<long long>(std::llround(v)));
  const bool negative = digits.front() == '-';
  if (negative) digits.erase(0, 1);
  if (grouped)
    for (int at = static_cast<int>(digits.size()) - 3; at > 0; at -= 3) digits.insert(at, ",");
  return negative ? "-" + digits : digits;
}

std::string duration(double seconds) {
  if (std::isnan(seconds)) return "-";
  if (seconds == 0) return "0";
  char buffer[32];
  if (seconds < 1e-3)
    std::snprintf(buffer, sizeof buffer, "%.0fus", seconds * 1e6);
  else if (seconds < 1)
    std::snprintf(buffer, sizeof buffer, "%.1fms", seconds * 1e3);
  else
    std::snprintf(buffer, sizeof buffer, "%.1fs", seconds);
  return buffer;
}

// Cuts to `width` columns (block characters are 3 bytes and one column each).
std::string fit(const std::string& line, int width) {
  std::string out;
  int columns = 0;
  for (std::size_t i = 0; i < line.size() && columns < width; ++columns) {
    const auto c = static_cast<unsigned char>(line[i]);
    const std::size_t n = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    out.append(line, i, n);
    i += n;
  }
  return out;
}

std::string sparkline(const std::deque<double>& values, std::size_t width, bool unicode) {
  static const char* blocks[] = {" ",      "\u2581", "\u2582", "\u2583", "\u2584",
                                 "\u2585", "\u2586", "\u2587", "\u2588"};
  static const char ascii[] = " .:-=+*#%@";
  const std::size_t n = std::min(values.size(), width);
  double top = 0;
  for (std::size_t i = values.size() - n; i < values.size(); ++i) top = std::max(top, values[i]);
  std::string out;
  for (std::size_t i = values.size() - n; i < values.size(); ++i) {
    const double share = top > 0 ? values[i] / top : 0;
    if (unicode)
      out += blocks[static_cast<int>(std::lround(share * 8))];
    else
      out += ascii[static_cast<int>(std::lround(share * 9))];
  }
  return out;
}

}  // namespace

std::vector<PipelineFigures> figures_between(const Scrape& previous, const Scrape& current) {
  std::set<std::string> names;
  for (const auto& [metric, samples] : current.samples)
    for (const auto& s : samples)
      if (auto it = s.labels.find("pipeline"); it != s.labels.end()) names.insert(it->second);
  if (names.empty()) names.insert("");  // a process whose series carry no pipeline label
  std::vector<PipelineFigures> all;
  for (const auto& name : names) {
    const Scrape before = name.empty() ? previous : one_pipeline(previous, name);
    const Scrape now = name.empty() ? current : one_pipeline(current, name);
    PipelineFigures f;
    f.name = name.empty() ? "pipeline" : name;
    f.received_per_s = rate(before, now, "sluice_messages_received_total");
    f.written_per_s = rate(before, now, "sluice_records_written_total");
    f.duplicates_per_s = rate(before, now, "sluice_records_duplicate_total");
    f.rejected_per_s = rate(before, now, "sluice_messages_rejected_total");
    f.failed_per_s = rate(before, now, "sluice_records_failed_total");
    f.received = now.sum("sluice_messages_received_total");
    f.written = now.sum("sluice_records_written_total");
    f.duplicates = now.sum("sluice_records_duplicate_total");
    f.rejected = now.sum("sluice_messages_rejected_total");
    f.in_flight = now.sum("sluice_messages_in_flight");
    f.max_in_flight = now.labelled("sluice_setting", "name", "max_in_flight", NAN);
    f.acks_pending = now.sum("sluice_acks_pending");
    f.receives = now.sum("sluice_concurrent_receives");
    f.backlog_visible = now.labelled("sluice_queue_backlog_messages", "state", "visible", NAN);
    f.backlog_in_flight =
        now.labelled("sluice_queue_backlog_messages", "state", "not_visible", NAN);
    f.dead_letters = gauge(now, "sluice_dead_letter_backlog_messages");
    f.oldest_age_s = gauge(now, "sluice_oldest_message_age_seconds");
    f.ready = now.sum("sluice_ready") > 0;
    f.paused = now.sum("sluice_paused") > 0;
    f.receive = latency(before, now, "sluice_poll_latency_seconds");
    f.handler = latency(before, now, "sluice_stage_latency_seconds");
    f.sink_batch = latency(before, now, "sluice_sink_write_latency_seconds");
    if (auto it = now.samples.find("sluice_messages_rejected_total"); it != now.samples.end())
      for (const auto& s : it->second) {
        const auto reason = s.labels.count("reason") ? s.labels.at("reason") : "";
        if (s.value <= 0) continue;
        const double was = before.labelled("sluice_messages_rejected_total", "reason", reason, 0);
        const double dt = now.at_s - before.at_s;
        f.rejects[reason] = {s.value, dt > 0 ? std::max(0.0, (s.value - was) / dt) : 0};
      }
    all.push_back(std::move(f));
  }
  return all;
}

std::vector<std::string> render_screen(const std::vector<PipelineFigures>& pipelines,
                                       const std::map<std::string, std::deque<double>>& history,
                                       const std::string& title, int width, bool unicode) {
  std::vector<std::string> lines;
  auto add = [&](const std::string& line) { lines.push_back(fit(line, std::max(width, 1))); };
  add(title);
  for (const auto& p : pipelines) {
    add("");
    add(p.name + "  " + (p.paused ? "PAUSED" : "running") + "  " +
        (p.ready ? "ready" : "NOT READY"));
    add("  rate/s     received " + figure(p.received_per_s) + "  written " +
        figure(p.written_per_s) + "  duplicates " + figure(p.duplicates_per_s) + "  rejected " +
        figure(p.rejected_per_s) + "  failed " + figure(p.failed_per_s));
    add("  total      received " + figure(p.received) + "  written " + figure(p.written) +
        "  duplicates " + figure(p.duplicates) + "  rejected " + figure(p.rejected));
    add("  in flight  " + figure(p.in_flight) + " / " + figure(p.max_in_flight) +
        "  acks pending " + figure(p.acks_pending) + "  receives " + figure(p.receives));
    add("  backlog    visible " + figure(p.backlog_visible) + "  in flight " +
        figure(p.backlog_in_flight) + "  oldest " + duration(p.oldest_age_s) + "  dead letters " +
        figure(p.dead_letters));
    add("  p50/p99    receive " + duration(p.receive.p50) + "/" + duration(p.receive.p99) +
        "  handler " + duration(p.handler.p50) + "/" + duration(p.handler.p99) + "  sink batch " +
        duration(p.sink_batch.p50) + "/" + duration(p.sink_batch.p99));
    std::string rejects = "  rejects   ";
    if (p.rejects.empty()) rejects += " none";
    for (const auto& [reason, figures] : p.rejects)
      rejects += " " + reason + " " + figure(figures.first) + " (" + figure(figures.second) + "/s)";
    add(rejects);
    if (auto it = history.find(p.name); it != history.end() && !it->second.empty()) {
      const int room = std::max(0, width - 23);
      add("  received/s " + sparkline(it->second, static_cast<std::size_t>(room), unicode) + " " +
          figure(it->second.back()));
    }
  }
  return lines;
}

std::string plain_line(const PipelineFigures& p) {
  std::ostringstream out;
  out << "pipeline=" << p.name << " state=" << (p.paused ? "paused" : "running")
      << " ready=" << (p.ready ? 1 : 0) << " received_per_s=" << figure(p.received_per_s, false)
      << " written_per_s=" << figure(p.written_per_s, false)
      << " duplicates_per_s=" << figure(p.duplicates_per_s, false)
      << " rejected_per_s=" << figure(p.rejected_per_s, false)
      << " received=" << figure(p.received, false) << " written=" << figure(p.written, false)
      << " rejected=" << figure(p.rejected, false) << " in_flight=" << figure(p.in_flight, false)
      << "/" << figure(p.max_in_flight, false) << " receives=" << figure(p.receives, false)
      << " backlog_visible=" << figure(p.backlog_visible, false)
      << " oldest=" << duration(p.oldest_age_s) << " dead_letters=" << figure(p.dead_letters, false)
      << " sink_batch_p99=" << duration(p.sink_batch.p99);
  for (const auto& [reason, figures] : p.rejects)
    out << " rejects_" << reason << "=" << figure(figures.first, false);
  return out.str();
}

namespace {

volatile std::sig_atomic_t interrupted = 0;
void on_signal(int) {
  interrupted = 1;
}

struct Screen {
  bool unicode = false;
  SCREEN* screen = nullptr;
  // newterm, not initscr: a terminal type this machine does not know (a new terminal
  // over SSH) is a null screen, and the view falls back to plain lines.
  bool open() {
    std::setlocale(LC_ALL, "");
    const char* codeset = std::setlocale(LC_CTYPE, nullptr);
    unicode = codeset && (std::strstr(codeset, "UTF-8") || std::strstr(codeset, "utf8"));
    screen = newterm(nullptr, stdout, stdin);
    if (!screen) return false;
    cbreak();
    noecho();
    curs_set(0);
    keypad(stdscr, TRUE);
    return true;
  }
  ~Screen() {
    if (!screen) return;
    endwin();
    delscreen(screen);
  }
  // Draws, then waits for a key up to `wait`: false when it was q (or Ctrl-C came).
  bool show(const std::vector<std::string>& lines, std::chrono::milliseconds wait) {
    erase();
    const int rows = LINES, count = static_cast<int>(lines.size());
    // A terminal too short for everything says what it cannot show.
    const int shown = count > rows ? std::max(rows - 1, 0) : count;
    for (int i = 0; i < shown; ++i) mvaddstr(i, 0, lines[static_cast<std::size_t>(i)].c_str());
    if (shown < count && rows > 0)
      mvaddstr(rows - 1, 0,
               ("... " + std::to_string(count - shown) + " more lines: a taller terminal")
                   .substr(0, static_cast<std::size_t>(std::max(COLS, 0)))
                   .c_str());
    refresh();
    const auto until = std::chrono::steady_clock::now() + wait;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0 || interrupted) return !interrupted;
      timeout(static_cast<int>(std::min<long long>(left.count(), 200)));
      const int key = getch();
      if (key == 'q' || key == 'Q' || key == 3) return false;
      if (key == KEY_RESIZE) return true;  // drawn again at the new size
    }
  }
};

std::string metrics_url(const TopOptions& options) {
  if (!options.config.empty() && !options.url.empty())
    throw std::invalid_argument("give --url or --config, not both");
  std::string url = options.url;
  if (!options.config.empty()) {
    const auto listen = load_pipelines(options.config).front().metrics_listen;
    if (listen.empty())
      throw std::invalid_argument("--config " + options.config +
                                  ": metrics.listen is empty: the process serves no /metrics");
    url = "http://" + listen;
  }
  if (url.find("://") == std::string::npos) url = "http://" + url;
  const auto path = url.find('/', url.find("://") + 3);
  if (path == std::string::npos)
    url += "/metrics";
  else if (path + 1 == url.size())
    url += "metrics";
  return url;
}

}  // namespace

int run_top(const TopOptions& options) {
  std::string url;
  observe::LocalUrl parsed;
  std::chrono::milliseconds interval{};
  try {
    interval = duration_flag("--interval", options.interval, std::chrono::milliseconds(100),
                             std::chrono::hours(1));
    url = metrics_url(options);
    try {
      parsed = observe::parse_local_url(url);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("--url: ") + e.what() +
                                  ", expected http://HOST:PORT");
    }
  } catch (const std::exception& e) {
    std::cerr << "sluice top: " << e.what() << "\n";
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  auto scrape = [&]() -> Scrape {
    observe::LocalRequest request;
    // Short: keys are not read while a scrape waits (q must not wait for a hung one).
    request.timeout =
        std::clamp(interval, std::chrono::milliseconds(500), std::chrono::milliseconds(2000));
    const auto response = observe::http_request(parsed, request);
    if (response.status != 200)
      throw std::runtime_error("answered " + std::to_string(response.status));
    auto scraped = parse_exposition(
        response.body,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    // Another program's metrics (a wrong port) would show as an idle pipeline.
    if (const auto first = scraped.samples.lower_bound("sluice_");
        first == scraped.samples.end() || !first->first.starts_with("sluice_"))
      throw std::runtime_error(
          "answered, but with no Sluice series (sluice_*): not a Sluice "
          "process's /metrics");
    return scraped;
  };
  const bool terminal = !options.plain && isatty(STDOUT_FILENO) && isatty(STDIN_FILENO);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  const std::string shown = common::redact_password(url);
  Scrape previous;
  try {
    previous = scrape();
  } catch (const std::exception& e) {
    std::cerr << "sluice top: " << shown << ": " << common::redact_secret(e.what(), url) << "\n";
    return 1;
  }
  std::map<std::string, std::deque<double>> history;
  std::unique_ptr<Screen> screen;
  if (terminal) {
    screen = std::make_unique<Screen>();
    if (!screen->open()) {
      screen.reset();
      std::cerr << "sluice top: this terminal (TERM="
                << (std::getenv("TERM") ? std::getenv("TERM") : "")
                << ") is not known here: plain lines instead\n";
    }
  }
  std::string problem;  // the last scrape's failure, shown until one succeeds
  auto title = [&] {
    const std::time_t now = std::time(nullptr);
    char clock[16];
    std::strftime(clock, sizeof clock, "%H:%M:%S", std::localtime(&now));
    return std::string(clock);
  };
  std::vector<std::string> lines{"sluice top  " + shown, "",
                                 "measuring the first " + options.interval + " ..."};
  for (int round = 0;; ++round) {
    // One interval (a terminal answers keys meanwhile; the screen is drawn at once).
    if (screen) {
      if (!screen->show(lines, interval)) break;
    } else {
      // In slices: a SIGTERM or SIGINT (timeout, a script, systemd) ends it at once.
      const auto until = std::chrono::steady_clock::now() + interval;
      while (!interrupted && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
            std::chrono::milliseconds(50), until - std::chrono::steady_clock::now()));
    }
    if (interrupted) break;
    std::vector<PipelineFigures> figures;
    try {
      auto current = scrape();
      figures = figures_between(previous, current);
      previous = std::move(current);
      problem.clear();
      for (const auto& f : figures) {
        auto& h = history[f.name];
        h.push_back(f.received_per_s);
        if (h.size() > 600) h.pop_front();
      }
    } catch (const std::exception& e) {
      problem = common::redact_secret(e.what(), url);
    }
    const std::string clock = title();
    if (screen) {
      if (!problem.empty() && round > 0) {
        lines.at(0) =
            render_screen({}, {}, "sluice top  " + shown + "  " + clock + "  [" + problem + "]",
                          COLS, screen->unicode)
                .front();
      } else {
        lines =
            render_screen(figures, history,
                          "sluice top  " + shown + "  " + clock + "  every " + options.interval +
                              "  q quits" + (problem.empty() ? "" : "  [" + problem + "]"),
                          COLS, screen->unicode);
      }
    } else {
      if (!problem.empty()) std::cout << clock << " error=\"" << problem << "\"\n";
      for (const auto& f : figures) std::cout << clock << " " << plain_line(f) << "\n";
      std::cout.flush();
    }
    if (options.iterations > 0 && round + 1 >= options.iterations) {
      if (screen) screen->show(lines, std::chrono::milliseconds(0));
      break;
    }
  }
  return 0;
}

}  // namespace sluice::app
