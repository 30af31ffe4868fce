//! `[telemetry]` checked, with the standard OpenTelemetry variables weighed against it: traces
//! are off unless `telemetry.otlp_endpoint` is set or `OTEL_TRACES_EXPORTER=otlp`, and
//! `OTEL_TRACES_EXPORTER=none` turns them off whatever the file says. Like `OUTBOX_*`, a
//! variable overrides the file's key. Errors name the key or variable and never quote an
//! endpoint (it may hold credentials).

use std::time::Duration;

use url::Url;

use super::parse::{bounded_duration, int};
use super::raw::{OtelEnv, RawTelemetry};
use super::{ConfigError, Sampler, Secret, TelemetryConfig, err};

/// Where spans go when `OTEL_TRACES_EXPORTER=otlp` names no endpoint: the specification's
/// default, a collector on the same host.
const DEFAULT_ENDPOINT: &str = "http://localhost:4318";
/// The OTLP/HTTP path of traces below a base URL.
const TRACES_PATH: &str = "/v1/traces";

/// The telemetry settings, or `None` when traces are off. Every value is checked either way,
/// so a mistake shows before the day traces are turned on.
pub(super) fn telemetry(
    raw: &RawTelemetry,
    env: &OtelEnv,
) -> Result<Option<TelemetryConfig>, ConfigError> {
    let service_name = service_name(raw, env)?;
    let sampler = sampler(raw, env)?;
    let queue_size = int("telemetry.queue_size", raw.queue_size, 1..=1_000_000)?;
    let export_timeout = bounded_duration(
        "telemetry.export_timeout",
        &raw.export_timeout,
        Duration::from_millis(100),
        Duration::from_secs(60),
    )?;
    let endpoint = endpoint(raw, env)?;
    let on = match env.traces_exporter.as_deref().map(str::trim) {
        None => !raw.otlp_endpoint.is_empty(),
        Some(e) if e.eq_ignore_ascii_case("otlp") => true,
        Some(e) if e.eq_ignore_ascii_case("none") => false,
        Some(e) => {
            return Err(err(
                "OTEL_TRACES_EXPORTER",
                format!("{e:?} is not supported: otlp (OTLP over HTTP/protobuf) or none"),
            ));
        }
    };
    Ok(on.then_some(TelemetryConfig {
        endpoint: Secret(endpoint.to_string()),
        service_name,
        sampler,
        queue_size,
        export_timeout,
    }))
}

/// `OTEL_SERVICE_NAME`, else `telemetry.service_name`: 1..=255 characters, none a control.
fn service_name(raw: &RawTelemetry, env: &OtelEnv) -> Result<String, ConfigError> {
    let (key, name) = match &env.service_name {
        Some(name) => ("OTEL_SERVICE_NAME", name.as_str()),
        None => ("telemetry.service_name", raw.service_name.as_str()),
    };
    if name.is_empty() || name.chars().count() > 255 || name.chars().any(char::is_control) {
        return Err(err(
            key,
            "must be 1..=255 characters without control characters",
        ));
    }
    Ok(name.to_owned())
}

/// `OTEL_TRACES_SAMPLER` else `telemetry.sampler`, with `OTEL_TRACES_SAMPLER_ARG` else
/// `telemetry.sampling_ratio` as the ratio of the ratio samplers.
fn sampler(raw: &RawTelemetry, env: &OtelEnv) -> Result<Sampler, ConfigError> {
    let (key, name) = match &env.sampler {
        Some(name) => ("OTEL_TRACES_SAMPLER", name.trim()),
        None => ("telemetry.sampler", raw.sampler.as_str()),
    };
    let (ratio_key, ratio) = match &env.sampler_arg {
        Some(arg) => (
            "OTEL_TRACES_SAMPLER_ARG",
            arg.trim().parse::<f64>().map_err(|_| {
                err(
                    "OTEL_TRACES_SAMPLER_ARG",
                    format!("{arg:?} is not a number"),
                )
            })?,
        ),
        None => ("telemetry.sampling_ratio", raw.sampling_ratio),
    };
    if !(0.0..=1.0).contains(&ratio) {
        return Err(err(ratio_key, format!("must be 0.0..=1.0, got {ratio}")));
    }
    Ok(match name {
        "always_on" => Sampler::AlwaysOn,
        "always_off" => Sampler::AlwaysOff,
        "traceidratio" => Sampler::TraceIdRatio(ratio),
        "parentbased_always_on" => Sampler::ParentBasedAlwaysOn,
        "parentbased_always_off" => Sampler::ParentBasedAlwaysOff,
        "parentbased_traceidratio" => Sampler::ParentBasedTraceIdRatio(ratio),
        _ => {
            return Err(err(
                key,
                format!(
                    "{name:?} is not one of always_on, always_off, traceidratio, \
                     parentbased_always_on, parentbased_always_off, parentbased_traceidratio"
                ),
            ));
        }
    })
}

/// The URL spans are POSTed to: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is, else
/// `OTEL_EXPORTER_OTLP_ENDPOINT` or `telemetry.otlp_endpoint` with `/v1/traces` appended
/// (unless the path already ends so), else the specification's default.
fn endpoint(raw: &RawTelemetry, env: &OtelEnv) -> Result<Url, ConfigError> {
    if let Some(url) = &env.traces_endpoint {
        return http_url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url);
    }
    let (key, base) = match &env.endpoint {
        Some(url) => ("OTEL_EXPORTER_OTLP_ENDPOINT", url.as_str()),
        None if !raw.otlp_endpoint.is_empty() => ("telemetry.otlp_endpoint", &*raw.otlp_endpoint),
        None => ("telemetry.otlp_endpoint", DEFAULT_ENDPOINT),
    };
    let mut url = http_url(key, base)?;
    if !url.path().ends_with(TRACES_PATH) {
        let path = format!("{}{TRACES_PATH}", url.path().trim_end_matches('/'));
        url.set_path(&path);
    }
    Ok(url)
}

/// An http:// or https:// URL with a host and no fragment; the error never quotes it.
fn http_url(key: &str, text: &str) -> Result<Url, ConfigError> {
    match Url::parse(text.trim()) {
        Ok(u)
            if matches!(u.scheme(), "http" | "https")
                && u.host().is_some()
                && u.fragment().is_none() =>
        {
            Ok(u)
        }
        _ => Err(err(
            key,
            "must be an http:// or https:// URL with a host (OTLP over HTTP)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::config::Config;
    use crate::config::fixtures::env;

    fn load(file: &str, vars: &[(&str, &str)]) -> Result<Option<TelemetryConfig>, ConfigError> {
        Config::load(Some(file), &env(vars)).map(|c| c.telemetry)
    }

    #[test]
    fn traces_are_off_unless_an_endpoint_or_otel_traces_exporter_turns_them_on() {
        assert_eq!(load("", &[]).unwrap(), None);
        // An endpoint in the environment alone does not turn them on (fleets set it for
        // every process); the exporter variable or the file does.
        assert_eq!(
            load("", &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]).unwrap(),
            None
        );
        let file = "[telemetry]\notlp_endpoint = \"http://collector:4318\"\n";
        let on = load(file, &[]).unwrap().expect("on");
        assert_eq!(on.endpoint.expose(), "http://collector:4318/v1/traces");
        assert_eq!(on.service_name, "outbox-dispatcher");
        assert_eq!(on.sampler, Sampler::ParentBasedTraceIdRatio(1.0));
        assert_eq!(
            (on.queue_size, on.export_timeout),
            (2048, Duration::from_secs(10))
        );
        assert_eq!(
            load(file, &[("OTEL_TRACES_EXPORTER", "none")]).unwrap(),
            None
        );
        let forced = load("", &[("OTEL_TRACES_EXPORTER", "otlp")])
            .unwrap()
            .unwrap();
        assert_eq!(forced.endpoint.expose(), "http://localhost:4318/v1/traces");
    }

    #[test]
    fn the_otel_variables_override_the_file() {
        let file = "[telemetry]\notlp_endpoint = \"http://collector:4318/base/\"\nservice_name = \"a\"\nsampler = \"always_on\"\n";
        let vars = [
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otel.example/otlp"),
            ("OTEL_SERVICE_NAME", "billing-dispatcher"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.1"),
        ];
        let t = load(file, &vars).unwrap().unwrap();
        assert_eq!(t.endpoint.expose(), "https://otel.example/otlp/v1/traces");
        assert_eq!(t.service_name, "billing-dispatcher");
        assert_eq!(t.sampler, Sampler::ParentBasedTraceIdRatio(0.1));
        // The per-signal endpoint is used as it is.
        let mut vars = vars.to_vec();
        vars.push(("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/custom"));
        let t = load(file, &vars).unwrap().unwrap();
        assert_eq!(t.endpoint.expose(), "http://c:4318/custom");
        // Without variables, the file's base path keeps its prefix; /v1/traces is not doubled.
        let t = load(file, &[]).unwrap().unwrap();
        assert_eq!(t.endpoint.expose(), "http://collector:4318/base/v1/traces");
        assert_eq!(t.sampler, Sampler::AlwaysOn);
        let full = "[telemetry]\notlp_endpoint = \"http://c:4318/v1/traces\"\n";
        let t = load(full, &[]).unwrap().unwrap();
        assert_eq!(t.endpoint.expose(), "http://c:4318/v1/traces");
    }

    /// A file, the environment, and the key or variable its error must name.
    type Case<'a> = (String, &'a [(&'a str, &'a str)], &'a str);

    #[test]
    fn bad_values_name_the_key_or_variable_without_quoting_the_endpoint() {
        let on = "[telemetry]\notlp_endpoint = \"http://c:4318\"\n";
        let cases: &[Case] = &[
            (
                "[telemetry]\notlp_endpoint = \"ftp://u:hunter2@c\"\n".into(),
                &[],
                "telemetry.otlp_endpoint",
            ),
            (
                "[telemetry]\notlp_endpoint = \"hunter2\"\n".into(),
                &[],
                "telemetry.otlp_endpoint",
            ),
            (
                on.into(),
                &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "hunter2:/x")],
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            ),
            (
                on.into(),
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "//hunter2")],
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
            (
                on.into(),
                &[("OTEL_TRACES_EXPORTER", "zipkin")],
                "OTEL_TRACES_EXPORTER",
            ),
            (
                on.into(),
                &[("OTEL_TRACES_SAMPLER", "jaeger_remote")],
                "OTEL_TRACES_SAMPLER",
            ),
            (
                on.into(),
                &[("OTEL_TRACES_SAMPLER_ARG", "half")],
                "OTEL_TRACES_SAMPLER_ARG",
            ),
            (
                on.into(),
                &[("OTEL_TRACES_SAMPLER_ARG", "1.5")],
                "OTEL_TRACES_SAMPLER_ARG",
            ),
            (
                on.into(),
                &[("OTEL_SERVICE_NAME", "a\nb")],
                "OTEL_SERVICE_NAME",
            ),
            (
                format!("{on}sampler = \"sometimes\"\n"),
                &[],
                "telemetry.sampler",
            ),
            (
                format!("{on}sampling_ratio = -0.5\n"),
                &[],
                "telemetry.sampling_ratio",
            ),
            (
                format!("{on}service_name = \"\"\n"),
                &[],
                "telemetry.service_name",
            ),
            (format!("{on}queue_size = 0\n"), &[], "telemetry.queue_size"),
            (
                format!("{on}export_timeout = \"1h\"\n"),
                &[],
                "telemetry.export_timeout",
            ),
            // Checked while off too.
            (
                "[telemetry]\nqueue_size = 0\n".into(),
                &[],
                "telemetry.queue_size",
            ),
        ];
        for (file, vars, key) in cases {
            let e = load(file, vars).unwrap_err().0;
            assert!(e.starts_with(key), "{file} {vars:?}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
        let unknown = Config::load(Some("[telemetry]\nendpoint = \"x\""), &HashMap::new());
        assert!(unknown.unwrap_err().0.contains("endpoint"));
    }

    #[test]
    fn a_whole_number_ratio_loads() {
        let t = load(
            "[telemetry]\notlp_endpoint = \"http://c\"\nsampling_ratio = 1\n",
            &[],
        );
        assert_eq!(t.unwrap().unwrap().sampler.ratio(), Some(1.0));
    }
}
