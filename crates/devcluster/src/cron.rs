//! Cron schedules as robfig/cron's `ParseStandard` reads them and `SpecSchedule.Next` steps
//! them (the library kube-controller-manager's cronjob_controllerv2 and the CronJob validation
//! in pkg/apis/batch/validation use): five fields, names of months and weekdays, ranges, lists,
//! steps, `?`, the descriptors `@yearly`/`@annually`, `@monthly`, `@weekly`,
//! `@daily`/`@midnight`, `@hourly`, and a `TZ=`/`CRON_TZ=` prefix. Difference: `@every DURATION`
//! is refused as unparseable. A leaf: used by the CronJob controller and by validation.

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// A parsed cron schedule: one bit per allowed value of each field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
    /// Day of month or of week was `*` or `?` (then both must match; otherwise either).
    dom_star: bool,
    dow_star: bool,
    /// From a `TZ=`/`CRON_TZ=` prefix.
    pub tz: Option<String>,
}

const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

fn parse_value(s: &str, names: &[&str], offset: u32) -> Result<u32, String> {
    if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
        return Ok(i as u32 + offset);
    }
    s.parse::<u32>().map_err(|_| format!("failed to parse int from {s}: strconv.Atoi: parsing {s:?}: invalid syntax"))
}

/// One field (robfig/cron `getField`/`getRange`): returns the bits and whether it was a star.
fn parse_field(field: &str, min: u32, max: u32, names: &[&str], offset: u32) -> Result<(u64, bool), String> {
    let mut bits = 0u64;
    let mut star = false;
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (part, None),
        };
        let (lo, hi, is_star) = if range == "*" || range == "?" {
            (min, max, true)
        } else if let Some((a, b)) = range.split_once('-') {
            (parse_value(a, names, offset)?, parse_value(b, names, offset)?, false)
        } else {
            let v = parse_value(range, names, offset)?;
            (v, if step.is_some() { max } else { v }, false)
        };
        let step = match step {
            Some(s) => {
                let n = s.parse::<u32>().map_err(|_| {
                    format!("failed to parse int from {s}: strconv.Atoi: parsing {s:?}: invalid syntax")
                })?;
                if n == 0 {
                    return Err(format!("step of range should be a positive number: {part}"));
                }
                n
            }
            None => 1,
        };
        if lo < min {
            return Err(format!("beginning of range ({lo}) below minimum ({min}): {part}"));
        }
        if hi > max {
            return Err(format!("end of range ({hi}) above maximum ({max}): {part}"));
        }
        if lo > hi {
            return Err(format!("beginning of range ({lo}) beyond end of range ({hi}): {part}"));
        }
        star |= is_star && step == 1;
        let mut v = lo;
        while v <= hi {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok((bits, star))
}

impl Schedule {
    /// Parse a schedule as `cron.ParseStandard` does; the error is robfig/cron's message.
    pub fn parse(spec: &str) -> Result<Schedule, String> {
        let mut spec = spec.trim();
        let mut tz = None;
        for prefix in ["TZ=", "CRON_TZ="] {
            if let Some(rest) = spec.strip_prefix(prefix) {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                if TimeZone::get(name).is_err() {
                    return Err(format!("provided bad location {name}: unknown time zone {name}"));
                }
                tz = Some(name.to_string());
                spec = tail.trim();
            }
        }
        if spec.is_empty() {
            return Err("empty spec string".into());
        }
        let expanded = match spec.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *".to_string(),
            "@monthly" => "0 0 1 * *".to_string(),
            "@weekly" => "0 0 * * 0".to_string(),
            "@daily" | "@midnight" => "0 0 * * *".to_string(),
            "@hourly" => "0 * * * *".to_string(),
            s if s.starts_with('@') => return Err(format!("unrecognized descriptor: {spec}")),
            _ => spec.to_string(),
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!("expected exactly 5 fields, found {}: {spec}", fields.len()));
        }
        let (minute, _) = parse_field(fields[0], 0, 59, &[], 0)?;
        let (hour, _) = parse_field(fields[1], 0, 23, &[], 0)?;
        let (dom, dom_star) = parse_field(fields[2], 1, 31, &[], 0)?;
        let (month, _) = parse_field(fields[3], 1, 12, &MONTHS, 1)?;
        let (dow, dow_star) = parse_field(fields[4], 0, 6, &DAYS, 0)?;
        Ok(Schedule { minute, hour, dom, month, dow, dom_star, dow_star, tz })
    }

    fn day_matches(&self, t: &DateTime) -> bool {
        let dom = self.dom & (1 << t.day()) != 0;
        let dow = self.dow & (1 << t.weekday().to_sunday_zero_offset()) != 0;
        if self.dom_star || self.dow_star { dom && dow } else { dom || dow }
    }

    /// The first scheduled time strictly after `after`, in `tz` (robfig/cron `SpecSchedule.Next`:
    /// skip whole months, days, hours, then minutes). `None` within five years: never.
    pub fn next(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let start = after.to_zoned(tz.clone()).datetime();
        // The next whole minute.
        let mut t = start.with().second(0).subsec_nanosecond(0).build().ok()?.checked_add(1.minute()).ok()?;
        let limit = t.year() + 5;
        while t.year() <= limit {
            if self.month & (1 << t.month()) == 0 {
                t = t.first_of_month().checked_add(1.month()).ok()?.start_of_day();
                continue;
            }
            if !self.day_matches(&t) {
                t = t.checked_add(1.day()).ok()?.start_of_day();
                continue;
            }
            if self.hour & (1 << t.hour()) == 0 {
                t = t.with().minute(0).build().ok()?.checked_add(1.hour()).ok()?;
                continue;
            }
            if self.minute & (1 << t.minute()) == 0 {
                t = t.checked_add(1.minute()).ok()?;
                continue;
            }
            return tz.to_ambiguous_zoned(t).compatible().ok().map(|z| z.timestamp()).filter(|ts| *ts > after);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn next(spec: &str, after: &str, tz: &str) -> String {
        let tz = TimeZone::get(tz).unwrap();
        Schedule::parse(spec).unwrap().next(at(after), &tz).unwrap().to_string()
    }

    #[test]
    fn schedules_parse_like_robfig_cron() {
        assert!(Schedule::parse("*/5 * * * *").is_ok());
        assert!(Schedule::parse("0 9 * JAN-MAR mon-fri").is_ok());
        assert!(Schedule::parse("@hourly").is_ok());
        assert!(Schedule::parse("TZ=Europe/Berlin 0 9 * * *").unwrap().tz.as_deref() == Some("Europe/Berlin"));
        assert_eq!(Schedule::parse("* * * *").unwrap_err(), "expected exactly 5 fields, found 4: * * * *");
        assert_eq!(Schedule::parse("61 * * * *").unwrap_err(), "end of range (61) above maximum (59): 61");
        assert!(Schedule::parse("@every 5m").unwrap_err().contains("unrecognized descriptor"));
        assert!(Schedule::parse("*/0 * * * *").is_err());
        assert!(Schedule::parse("x * * * *").is_err());
    }

    #[test]
    fn next_times() {
        assert_eq!(next("*/5 * * * *", "2026-01-01T00:02:30Z", "UTC"), "2026-01-01T00:05:00Z");
        assert_eq!(next("@hourly", "2026-01-01T00:00:00Z", "UTC"), "2026-01-01T01:00:00Z");
        assert_eq!(next("0 0 29 2 *", "2026-03-01T00:00:00Z", "UTC"), "2028-02-29T00:00:00Z");
        // Either day field matches when both are restricted.
        assert_eq!(next("0 0 13 * 5", "2026-01-01T00:00:00Z", "UTC"), "2026-01-02T00:00:00Z");
        // A star day of month: the weekday alone decides.
        assert_eq!(next("0 0 * * 1", "2026-01-01T00:00:00Z", "UTC"), "2026-01-05T00:00:00Z");
        assert_eq!(next("0 9 * * *", "2026-06-01T00:00:00Z", "Europe/Berlin"), "2026-06-01T07:00:00Z");
    }
}
