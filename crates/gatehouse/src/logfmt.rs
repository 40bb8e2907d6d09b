//! The text log format, written without the general formatting machinery.
//!
//! Every request logs a line, so formatting it is part of every request's
//! cost, and `tracing-subscriber`'s own text format takes about twice as
//! long (a `core::fmt` pass per field with colour styles that are off
//! anyway, a date conversion per line, the shortest-float search for
//! `latency_ms`; measured in `bench/RESULTS.md`, "Logging plumbing"). [`Text`] and [`Fields`] write
//! the same bytes as `tracing_subscriber::fmt::format::Full` with
//! `DefaultFields` and no ANSI colours:
//!
//! ```text
//! 2026-11-24T08:10:00.123456Z  INFO request{request_id=…}: target: message key=value …
//! ```
//!
//! Plain strings, integers, booleans, and floats with at most three
//! decimals are written directly; anything else (the message, errors,
//! strings that need escaping, other floats) goes through
//! `DefaultVisitor`, so the output stays exactly what it was. On a terminal
//! (colours on) the stock formatter is used instead.

use std::cell::Cell;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The event format: timestamp, level, span scope, target, fields.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Text {
    /// Whether lines start with a timestamp (off only in tests, to compare
    /// with the stock format).
    pub(crate) time: bool,
}

impl<S> FormatEvent<S, Fields> for Text
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, Fields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        if self.time {
            write_timestamp(&mut writer, SystemTime::now())?;
            writer.write_char(' ')?;
        }
        // `log` records carry their real target and level as fields.
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        writer.write_str(level_str(meta.level()))?;
        writer.write_char(' ')?;
        if let Some(scope) = ctx.event_scope() {
            let mut seen = false;
            for span in scope.from_root() {
                writer.write_str(span.metadata().name())?;
                seen = true;
                let ext = span.extensions();
                if let Some(fields) = ext.get::<FormattedFields<Fields>>()
                    && !fields.is_empty()
                {
                    writer.write_char('{')?;
                    writer.write_str(fields)?;
                    writer.write_char('}')?;
                }
                writer.write_char(':')?;
            }
            if seen {
                writer.write_char(' ')?;
            }
        }
        writer.write_str(meta.target())?;
        writer.write_str(": ")?;
        ctx.format_fields(writer.by_ref(), event)?;
        writer.write_char('\n')
    }
}

/// The level as `tracing-subscriber` pads it (right-aligned to five).
fn level_str(level: &Level) -> &'static str {
    match *level {
        Level::TRACE => "TRACE",
        Level::DEBUG => "DEBUG",
        Level::INFO => " INFO",
        Level::WARN => " WARN",
        Level::ERROR => "ERROR",
    }
}

/// The field format: `name=value` pairs separated by spaces, the message
/// first and bare.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Fields;

impl<'writer> FormatFields<'writer> for Fields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut v = Visitor {
            writer,
            is_empty: true,
            result: Ok(()),
        };
        fields.record(&mut v);
        v.result
    }
}

struct Visitor<'a> {
    writer: Writer<'a>,
    is_empty: bool,
    result: fmt::Result,
}

impl Visitor<'_> {
    /// Names written as `name=` by the fast paths; the others (`message`,
    /// raw identifiers, `log.` metadata) have rules of their own.
    fn plain(field: &Field) -> bool {
        let name = field.name();
        name != "message" && !name.starts_with("r#") && !name.starts_with("log.")
    }

    /// Hands one field to `tracing-subscriber`'s own visitor.
    fn fallback(&mut self, field: &Field, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        if self.result.is_err() {
            return;
        }
        let mut v = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        record(&mut v);
        self.result = v.finish();
        // It skips `log.` fields (metadata of `log` records) without a trace.
        if !field.name().starts_with("log.") {
            self.is_empty = false;
        }
    }

    /// Writes `name=` (after a space unless first), then `value`.
    fn write(&mut self, field: &Field, value: impl FnOnce(&mut Writer<'_>) -> fmt::Result) {
        if self.result.is_err() {
            return;
        }
        let first = std::mem::replace(&mut self.is_empty, false);
        let w = &mut self.writer;
        self.result = (if first { Ok(()) } else { w.write_char(' ') })
            .and_then(|()| w.write_str(field.name()))
            .and_then(|()| w.write_char('='))
            .and_then(|()| value(w));
    }
}

impl Visit for Visitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        // `{:?}` of a string is itself in quotes when nothing needs escaping.
        if Self::plain(field)
            && value
                .bytes()
                .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
        {
            self.write(field, |w| {
                w.write_char('"')?;
                w.write_str(value)?;
                w.write_char('"')
            });
        } else {
            self.fallback(field, |v| v.record_str(field, value));
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if Self::plain(field) {
            self.write(field, |w| write_u64(w, value));
        } else {
            self.fallback(field, |v| v.record_u64(field, value));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if Self::plain(field) {
            self.write(field, |w| {
                if value < 0 {
                    w.write_char('-')?;
                }
                write_u64(w, value.unsigned_abs())
            });
        } else {
            self.fallback(field, |v| v.record_i64(field, value));
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if Self::plain(field) {
            self.write(field, |w| w.write_str(if value { "true" } else { "false" }));
        } else {
            self.fallback(field, |v| v.record_bool(field, value));
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        match milli_units(value) {
            Some(thousandths) if Self::plain(field) => {
                self.write(field, |w| write_thousandths(w, thousandths));
            }
            _ => self.fallback(field, |v| v.record_f64(field, value)),
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.fallback(field, |v| v.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if Self::plain(field) {
            // What `DefaultVisitor` writes without colours, minus its styling pass.
            self.write(field, |w| write!(w, "{value:?}"));
        } else {
            self.fallback(field, |v| v.record_debug(field, value));
        }
    }
}

fn write_u64(w: &mut Writer<'_>, mut n: u64) -> fmt::Result {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    w.write_str(std::str::from_utf8(&buf[i..]).map_err(|_| fmt::Error)?)
}

/// `value` as a whole number of thousandths, when `{:?}` of it is exactly
/// that decimal (a latency rounded to the microsecond, say): finite, not
/// negative, below 10^12 (where `{:?}` never uses an exponent), and the
/// double nearest to `thousandths / 1000`.
fn milli_units(value: f64) -> Option<u64> {
    let k = (value * 1000.0).round();
    // Only these values round-trip; `k` is then a whole number below 10^15.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    ((0.0..1e15).contains(&k) && k / 1000.0 == value && value.is_sign_positive())
        .then_some(k as u64)
}

/// Writes `k / 1000` as `{:?}` of the float does: trailing zeros dropped,
/// but at least one decimal (`5.0`, `0.25`, `0.734`).
fn write_thousandths(w: &mut Writer<'_>, k: u64) -> fmt::Result {
    write_u64(w, k / 1000)?;
    let frac = k % 1000;
    let digits = [
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ];
    let keep = match frac {
        0 => 1,
        f if f % 100 == 0 => 1,
        f if f % 10 == 0 => 2,
        _ => 3,
    };
    w.write_char('.')?;
    w.write_str(std::str::from_utf8(&digits[..keep]).map_err(|_| fmt::Error)?)
}

thread_local! {
    /// The last second formatted on this thread and its `YYYY-MM-DDTHH:MM:SS`.
    static SECOND: Cell<(u64, [u8; 19])> = const { Cell::new((u64::MAX, [0; 19])) };
}

/// `2026-11-24T08:10:00.123456Z`, as `tracing-subscriber`'s `SystemTime`
/// timer writes it (UTC, microseconds). The date part is computed once per
/// second per thread.
fn write_timestamp(w: &mut Writer<'_>, now: SystemTime) -> fmt::Result {
    let Ok(since) = now.duration_since(UNIX_EPOCH) else {
        return w.write_str("<unknown time>");
    };
    let secs = since.as_secs();
    let (cached, mut text) = SECOND.get();
    if cached != secs {
        text = civil(secs).ok_or(fmt::Error)?;
        SECOND.set((secs, text));
    }
    w.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)?;
    let micros = since.subsec_micros();
    let mut frac = [b'.', b'0', b'0', b'0', b'0', b'0', b'0', b'Z'];
    let mut m = micros;
    for slot in frac[1..7].iter_mut().rev() {
        *slot = b'0' + (m % 10) as u8;
        m /= 10;
    }
    w.write_str(std::str::from_utf8(&frac).map_err(|_| fmt::Error)?)
}

/// `YYYY-MM-DDTHH:MM:SS` of a unix time (proleptic Gregorian, UTC), for
/// years up to 9999; `None` after that.
fn civil(secs: u64) -> Option<[u8; 19]> {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    if year > 9999 {
        return None;
    }
    let mut out = *b"0000-00-00T00:00:00";
    let mut put = |at: usize, width: usize, mut v: u64| {
        for i in (at..at + width).rev() {
            out[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, 4, year);
    put(5, 2, month);
    put(8, 2, day);
    put(11, 2, rem / 3600);
    put(14, 2, rem / 60 % 60);
    put(17, 2, rem % 60);
    Some(out)
}

/// Year, month, day of a count of days since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use tracing_subscriber::fmt::MakeWriter;

    /// Collects what a subscriber writes.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Capture {
        type Writer = Capture;
        fn make_writer(&'a self) -> Capture {
            self.clone()
        }
    }

    impl Capture {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    /// Events of every shape the service logs, and some it might.
    fn emit() {
        #[derive(Debug)]
        struct Opaque {
            #[allow(dead_code)]
            n: u8,
        }
        let err = std::io::Error::other("disk \"full\"");
        let outer = tracing::info_span!("request", request_id = %"0193-abc");
        let _g = outer.enter();
        tracing::info!(
            request_id = %"0193-abc", method = "POST", route = %"/graphql", status = 200u16,
            latency_ms = 0.734, client_id = Some("demo-app"), subject = None::<&str>, "request"
        );
        let inner = tracing::warn_span!("inner", n = 3, empty = tracing::field::Empty);
        let _i = inner.enter();
        inner.record("empty", "filled");
        tracing::warn!(
            quoted = "say \"hi\"\n", unicode = "café", negative = -42i64, big = u64::MAX,
            yes = true, whole = 5.0, tiny = 1e-7, huge = 1e300, neg = -0.5, nan = f64::NAN,
            r#type = "raw", opaque = ?Opaque { n: 1 }, error = &err as &dyn std::error::Error,
            "message with \x1b[31m escape"
        );
        tracing::error!("only a message");
        // A `log` record (tokio-postgres logs through `log`): its target
        // and level are fields.
        tracing_log::format_trace(
            &log::Record::builder()
                .args(format_args!("slow statement"))
                .level(log::Level::Warn)
                .target("tokio_postgres::query")
                .module_path(Some("tokio_postgres::query"))
                .file(Some("logger.rs"))
                .line(Some(7))
                .build(),
        )
        .unwrap();
        tracing::debug!(x = 1, "not enabled at info");
    }

    #[test]
    fn lines_are_those_of_the_stock_format_without_colours() {
        let stock = Capture::default();
        let ours = Capture::default();
        let sub = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .with_writer(stock.clone())
            .finish();
        tracing::subscriber::with_default(sub, emit);
        let sub = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(ours.clone())
            .fmt_fields(Fields)
            .event_format(Text { time: false })
            .finish();
        tracing::subscriber::with_default(sub, emit);
        assert!(
            stock.text().contains("latency_ms=0.734"),
            "{}",
            stock.text()
        );
        assert!(stock.text().contains(" WARN request{request_id=0193-abc}:inner{n=3 empty=\"filled\"}: tokio_postgres::query: slow statement\n"), "{}", stock.text());
        assert_eq!(ours.text(), stock.text());
    }

    #[test]
    fn floats_with_three_decimals_print_as_debug_does() {
        let mut checked = 0;
        for k in (0..200_000u64).chain([999_999_999, 123_456_789_012, 999_999_999_999_999]) {
            let v = (k as f64) / 1000.0;
            let mut ours = String::new();
            let mut w = Writer::new(&mut ours);
            let Some(t) = milli_units(v) else {
                panic!("{v} is a whole number of thousandths")
            };
            write_thousandths(&mut w, t).unwrap();
            assert_eq!(ours, format!("{v:?}"));
            checked += 1;
        }
        assert!(checked > 200_000);
        for v in [
            0.0005,
            1e-7,
            0.1 + 0.2,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            1e15,
            1e300,
            -0.0,
        ] {
            assert_eq!(milli_units(v), None, "{v}");
        }
    }

    #[test]
    fn timestamps_are_those_of_the_stock_timer() {
        use tracing_subscriber::fmt::time::FormatTime;
        // The stock timer reads the clock itself: compare the seconds it
        // writes with ours for the same second, then check dates far apart.
        let mut stock = String::new();
        tracing_subscriber::fmt::time::SystemTime
            .format_time(&mut Writer::new(&mut stock))
            .unwrap();
        let mut ours = String::new();
        write_timestamp(&mut Writer::new(&mut ours), SystemTime::now()).unwrap();
        assert_eq!(ours.len(), stock.len(), "{ours} vs {stock}");
        assert_eq!(ours.len(), "2026-11-24T08:10:00.123456Z".len());
        for (secs, text) in [
            (0, "1970-01-01T00:00:00"),
            (951_782_400, "2000-02-29T00:00:00"),
            (1_795_939_199, "2026-11-29T07:59:59"),
            (4_107_542_399, "2100-02-28T23:59:59"),
            (4_107_542_400, "2100-03-01T00:00:00"),
            (253_402_300_799, "9999-12-31T23:59:59"),
        ] {
            assert_eq!(std::str::from_utf8(&civil(secs).unwrap()).unwrap(), text);
        }
        assert_eq!(civil(253_402_300_800), None);
        let mut s = String::new();
        let t = UNIX_EPOCH + Duration::new(951_782_400, 7_000);
        write_timestamp(&mut Writer::new(&mut s), t).unwrap();
        assert_eq!(s, "2000-02-29T00:00:00.000007Z");
        // Every day of four centuries against a day-by-day count.
        let (mut y, mut m, mut d) = (1970u64, 1u64, 1u64);
        for days in 0..146_097 {
            assert_eq!(civil_from_days(days), (y, m, d), "day {days}");
            let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
            let len = [
                31,
                if leap { 29 } else { 28 },
                31,
                30,
                31,
                30,
                31,
                31,
                30,
                31,
                30,
                31,
            ];
            d += 1;
            if d > len[(m - 1) as usize] {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
    }
}
