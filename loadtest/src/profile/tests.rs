use super::*;

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

fn p(s: &str) -> Profile {
    parse(s, 10.0).unwrap_or_else(|e| panic!("{e}"))
}

/// Every due time, in order, by iterating the cursor as the scheduler does.
fn all_due(prof: &Profile) -> Vec<f64> {
    let mut c = Cursor::default();
    (0..).map_while(|n| prof.due_from(n, &mut c)).collect()
}

#[test]
fn a_constant_rate_sends_evenly_from_half_a_period() {
    let prof = p("100");
    assert_eq!(prof.length(), 10.0, "a bare rate lasts --duration");
    let due = all_due(&prof);
    assert_eq!(due.len(), 1000);
    assert!(close(due[0], 0.005, 1e-12));
    assert!(close(due[1] - due[0], 0.01, 1e-12));
    assert!(close(due[999], 9.995, 1e-9));
    assert_eq!(prof.due_before(1.0), 100);
    assert_eq!(prof.phases()[0].label, "100/s");
}

#[test]
fn a_ramp_sends_its_area_and_its_due_times_invert_the_cumulative() {
    let prof = p("ramp(0, 100, 10s)");
    assert!(close(prof.total(), 500.0, 1e-9));
    let due = all_due(&prof);
    assert_eq!(due.len(), 500);
    for (n, t) in due.iter().enumerate() {
        assert!(close(prof.arrivals_by(*t), n as f64 + 0.5, 1e-6), "n={n} t={t}");
    }
    // Quadratic cumulative: half of the requests come in the last 30 % of the ramp.
    assert!(close(prof.arrivals_by(5.0), 125.0, 1e-9));
    assert!(close(prof.rate_at(2.5), 25.0, 1e-9));
    // Down ramps too.
    let down = p("ramp(100, 0, 10s)");
    assert_eq!(all_due(&down).len(), 500);
    assert!(close(down.arrivals_by(5.0), 375.0, 1e-9));
}

#[test]
fn steps_up_and_down_are_one_phase_each_with_their_own_rates() {
    let prof = p("steps(10 20 40 20 10, 5s)");
    assert_eq!(prof.length(), 25.0);
    let labels: Vec<_> = prof.phases().iter().map(|ph| ph.label.as_str()).collect();
    assert_eq!(labels, ["10/s", "20/s", "40/s", "20/s", "10/s"]);
    assert!(close(prof.total(), 500.0, 1e-9));
    assert_eq!(prof.rate_at(12.0), 40.0);
    assert_eq!(prof.phase_at(12.0), Some(2));
    assert_eq!(prof.phase_at(24.99), Some(4));
    assert_eq!(prof.phase_at(25.0), None);
    // Commas work as separators too.
    assert_eq!(p("steps(10, 20, 40, 20, 10, 5s)"), prof);
    // Requests per step.
    let due = all_due(&prof);
    let in_step = |k: f64| due.iter().filter(|t| **t >= 5.0 * k && **t < 5.0 * (k + 1.0)).count();
    assert_eq!([in_step(0.0), in_step(1.0), in_step(2.0), in_step(3.0), in_step(4.0)], [50, 100, 200, 100, 50]);
}

#[test]
fn sequences_add_lengths_and_sums_add_rates() {
    let prof = p("ramp(0, 100, 10s), const(100, 1m) then ramp(100, 0, 10s)");
    assert_eq!(prof.length(), 80.0);
    assert!(close(prof.total(), 500.0 + 6000.0 + 500.0, 1e-6));
    assert_eq!(prof.phases().len(), 3);
    assert_eq!(prof.phases()[1].start, 10.0);
    assert_eq!(prof.phases()[2].label, "ramp 100→0/s");

    // A bare rate in a sum lasts as long as the sum.
    let sum = p("100 + spike(0, 400, 1m, 5s)");
    assert_eq!(sum.length(), 60.0);
    assert_eq!(sum.rate_at(10.0), 100.0);
    assert_eq!(sum.rate_at(30.0), 500.0);
    assert!(close(sum.total(), 6000.0 + 2000.0, 1e-6));
    // Sums of ramps are exact: 0->100 plus 100->0 is 100 everywhere.
    let flat = p("ramp(0, 100, 10s) + ramp(100, 0, 10s)");
    for t in [0.0, 2.5, 5.0, 9.9] {
        assert!(close(flat.rate_at(t), 100.0, 1e-9), "{t}");
    }
    // Brackets group.
    let g = p("(const(10, 1s), const(20, 1s)) + 5");
    assert_eq!(g.length(), 2.0);
    assert!(close(g.total(), 10.0 + 20.0 + 10.0, 1e-9));
}

#[test]
fn a_sine_integrates_to_its_mean_over_whole_periods_and_never_goes_below_zero() {
    let prof = p("sine(100, 50, 20s, 1m)");
    assert!(close(prof.total(), 6000.0, 1e-6));
    assert!(close(prof.rate_at(5.0), 150.0, 0.5));
    assert!(close(prof.rate_at(15.0), 50.0, 0.5));
    let clipped = p("sine(0, 50, 10s, 10s)");
    assert!(prof.pieces().iter().chain(clipped.pieces()).all(|pc| pc.r0 >= 0.0 && pc.r1 >= 0.0));
    // Half a wave of area 50 * 10 / π.
    assert!(close(clipped.total(), 500.0 / std::f64::consts::PI, 0.5));
}

#[test]
fn a_spike_sits_in_the_middle() {
    let prof = p("spike(50, 500, 20s, 2s)");
    assert_eq!(prof.rate_at(8.9), 50.0);
    assert_eq!(prof.rate_at(9.0), 500.0);
    assert_eq!(prof.rate_at(11.0), 50.0);
    let labels: Vec<_> = prof.phases().iter().map(|ph| ph.label.as_str()).collect();
    assert_eq!(labels, ["50/s", "spike 500/s", "50/s"]);
    assert_eq!(p("spike(1, 2, 10s)").phases()[1].end - p("spike(1, 2, 10s)").phases()[1].start, 1.0);
}

#[test]
fn a_trace_is_interpolated_scaled_and_shifted_to_start_at_zero() {
    let dir = std::env::temp_dir().join(format!("loadtest-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("day.csv");
    std::fs::write(&file, "time_s,rate\n100,0\n110,100\n120,100\n# the end\n130,0\n").unwrap();
    let prof = p(&format!("trace({}, 2)", file.display()));
    assert_eq!(prof.length(), 30.0);
    assert!(close(prof.rate_at(5.0), 100.0, 1e-9));
    assert!(close(prof.total(), 2.0 * (500.0 + 1000.0 + 500.0), 1e-9));
    assert_eq!(prof.phases()[0].label, "trace day.csv");
    std::fs::write(&file, "0,1\n5,x\n").unwrap();
    assert!(parse(&format!("trace({})", file.display()), 10.0).unwrap_err().message.contains("line 2"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn rates_per_minute_and_durations_in_every_unit() {
    assert!(close(p("const(600/m, 1m)").total(), 600.0, 1e-9));
    assert_eq!(p("const(1, 500ms)").length(), 0.5);
    assert_eq!(p("const(1, 1h)").length(), 3600.0);
    assert_eq!(p("const(1e2/s, 2s)").total(), 200.0);
}

#[test]
fn zero_rate_pieces_send_nothing_and_later_pieces_still_do() {
    let prof = p("const(0, 5s), const(2, 5s)");
    let due = all_due(&prof);
    assert_eq!(due.len(), 10);
    assert!(due[0] >= 5.0, "{due:?}");
}

#[test]
fn mistakes_are_reported_with_their_position() {
    for (bad, at, word) in [
        ("ramp(0, 100)", 11, "\",\""),
        ("stpes(1, 1s)", 0, "unknown shape"),
        ("const(10, 10)", 10, "duration"),
        ("steps(5s)", 6, "at least one rate"),
        ("const(10, 1s) const(1, 1s)", 14, "unexpected"),
        ("-5", 0, "number"),
        ("spike(1, 2, 1s, 2s)", 18, "wider"),
    ] {
        let e = parse(bad, 10.0).unwrap_err();
        assert_eq!(e.at, at, "{bad}: {e}");
        assert!(e.to_string().contains(word), "{bad}: {e}");
    }
}

#[test]
fn truncation_and_due_before_agree() {
    let prof = p("steps(10 20, 5s)").truncate(7.5);
    assert_eq!(prof.length(), 7.5);
    assert_eq!(all_due(&prof).len(), 100);
    assert_eq!(prof.phases().len(), 2);
    for t in [0.0, 0.05, 0.1, 3.3, 5.0, 7.5] {
        let by_iter = all_due(&prof).iter().filter(|d| **d < t).count() as u64;
        assert_eq!(prof.due_before(t), by_iter, "t={t}");
    }
}

#[test]
fn the_readme_examples_parse() {
    for (text, length) in [
        ("200", 10.0),
        ("steps(10 20 40 80 40 20 10, 15s)", 105.0),
        ("ramp(0, 500, 1m)", 60.0),
        ("ramp(0, 100, 10s), const(100, 1m), ramp(100, 0, 10s)", 80.0),
        ("sine(100, 50, 20s, 2m)", 120.0),
        ("spike(50, 500, 20s, 2s)", 20.0),
        ("100 + spike(0, 400, 1m, 5s)", 60.0),
        ("const(50, 10s) then (200 + sine(0, 100, 10s, 30s))", 40.0),
        ("steps(20 40 80 40 20, 15s)", 75.0),
    ] {
        assert_eq!(p(text).length(), length, "{text}");
    }
}
