//! CPU time of processes, from `/proc/PID/stat` (utime + stime): the figure
//! that survives a noisy shared machine. Every system's servers are measured
//! the same way, over the same window as its cycles, and so is the harness
//! process, which runs every benchmark client. Also the servers' resident
//! memory, from `/proc/PID/status`, which herds report.

use std::time::Duration;

/// CPU time (user + system) `pid` has used so far; `None` when it is gone
/// or `/proc` is unreadable.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// CPU time of all `pids` together; `None` if any is unreadable.
pub fn cpu_time_of(pids: &[u32]) -> Option<Duration> {
    pids.iter().map(|pid| cpu_time(*pid)).sum()
}

/// CPU time of this process (the harness: every benchmark client).
pub fn own_cpu_time() -> Option<Duration> {
    cpu_time(std::process::id())
}

/// Resident memory of all `pids` together, in MiB; `None` when there are
/// none or any is unreadable.
pub fn rss_mib_of(pids: &[u32]) -> Option<f64> {
    if pids.is_empty() {
        return None;
    }
    let kib: Option<u64> =
        pids.iter().map(|pid| parse_rss_kib(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)).sum();
    Some(kib? as f64 / 1024.0)
}

/// The `VmRSS:` line of a `/proc/PID/status` file, in KiB.
fn parse_rss_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// utime + stime from a `/proc/PID/stat` line. The command name (field 2)
/// may hold spaces and parentheses, so fields are counted after its last `)`.
fn parse_stat(stat: &str) -> Option<Duration> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of the line; `after_name` starts at field 3.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_secs_f64(ticks as f64 / clock_ticks_per_second()))
}

fn clock_ticks_per_second() -> f64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(hz)) if hz > 0 => hz as f64,
        // Linux has used 100 on every common platform since 2.6.
        _ => 100.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures utime and stime are read after a command name with spaces and parentheses.
    #[test]
    fn stat_fields_are_counted_after_the_name() {
        let hz = clock_ticks_per_second();
        let line = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 99 0 0";
        assert_eq!(parse_stat(line), Some(Duration::from_secs_f64(300.0 / hz)));
        assert_eq!(parse_stat("garbage"), None);
    }

    // Ensures the resident set is read from its line, and this process has one.
    #[test]
    fn resident_memory_is_read_from_status() {
        assert_eq!(parse_rss_kib("Name:\tx\nVmRSS:\t  2048 kB\nThreads: 3\n"), Some(2048));
        assert_eq!(parse_rss_kib("Name:\tx\n"), None);
        assert!(rss_mib_of(&[std::process::id()]).is_some_and(|mib| mib > 0.0));
        assert_eq!(rss_mib_of(&[]), None);
    }

    // Ensures this process's own CPU time is readable and grows with work.
    #[test]
    fn own_cpu_time_grows() {
        let before = own_cpu_time().expect("readable");
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(60) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        assert!(own_cpu_time().expect("readable") > before);
    }
}
