use super::*;

/// A calm device: 10 000 bytes, half used, no other evidence.
fn calm() -> PressureInput {
    PressureInput {
        total_bytes: 10_000,
        used_bytes: 5_000,
        free_bytes: 5_000,
        time_to_exhaustion_seconds: None,
        retries_in_window: None,
        ooms_in_window: None,
    }
}

fn judge(input: PressureInput) -> Pressure {
    pressure(&input, &PressureThresholds::default())
}

#[test]
fn a_calm_device_is_ok_without_reasons() {
    let verdict = judge(calm());
    assert_eq!(verdict.level, PressureLevel::Ok);
    assert!(verdict.reasons.is_empty());
}

#[test]
fn an_oom_in_the_window_is_critical() {
    let verdict = judge(PressureInput { ooms_in_window: Some(1), ..calm() });
    assert_eq!(verdict.level, PressureLevel::Critical);
    assert_eq!(verdict.reasons, vec![reason::OOM_IN_WINDOW]);
    assert_eq!(judge(PressureInput { ooms_in_window: Some(0), ..calm() }).level, PressureLevel::Ok);
}

#[test]
fn free_just_below_two_percent_is_critical_and_at_it_is_high() {
    let below = judge(PressureInput { free_bytes: 199, ..calm() });
    assert_eq!(below.level, PressureLevel::Critical);
    assert_eq!(below.reasons, vec![reason::FREE_BELOW_CRITICAL, reason::FREE_BELOW_HIGH]);
    let at = judge(PressureInput { free_bytes: 200, ..calm() });
    assert_eq!(at.level, PressureLevel::High);
    assert_eq!(at.reasons, vec![reason::FREE_BELOW_HIGH]);
}

#[test]
fn free_just_below_five_percent_is_high_and_at_it_is_ok() {
    let below = judge(PressureInput { free_bytes: 499, ..calm() });
    assert_eq!(below.level, PressureLevel::High);
    assert_eq!(below.reasons, vec![reason::FREE_BELOW_HIGH]);
    assert_eq!(judge(PressureInput { free_bytes: 500, ..calm() }).level, PressureLevel::Ok);
}

#[test]
fn allocator_retries_in_the_window_are_high() {
    let verdict = judge(PressureInput { retries_in_window: Some(3), ..calm() });
    assert_eq!(verdict.level, PressureLevel::High);
    assert_eq!(verdict.reasons, vec![reason::RETRIES_IN_WINDOW]);
    let none = judge(PressureInput { retries_in_window: Some(0), ..calm() });
    assert_eq!(none.level, PressureLevel::Ok);
}

#[test]
fn used_just_above_85_percent_is_elevated_and_at_it_is_ok() {
    let above = judge(PressureInput { used_bytes: 8_501, ..calm() });
    assert_eq!(above.level, PressureLevel::Elevated);
    assert_eq!(above.reasons, vec![reason::USED_ABOVE_ELEVATED]);
    assert_eq!(judge(PressureInput { used_bytes: 8_500, ..calm() }).level, PressureLevel::Ok);
}

#[test]
fn time_to_exhaustion_boundaries_map_to_levels() {
    let with =
        |seconds: f64| judge(PressureInput { time_to_exhaustion_seconds: Some(seconds), ..calm() });
    let critical = with(299.0);
    assert_eq!(critical.level, PressureLevel::Critical);
    assert_eq!(critical.reasons.first(), Some(&reason::EXHAUSTION_BELOW_CRITICAL));
    assert_eq!(with(300.0).level, PressureLevel::High);
    assert_eq!(with(1_799.0).level, PressureLevel::High);
    let elevated = with(1_800.0);
    assert_eq!(elevated.level, PressureLevel::Elevated);
    assert_eq!(elevated.reasons, vec![reason::EXHAUSTION_BELOW_ELEVATED]);
    assert_eq!(with(7_199.0).level, PressureLevel::Elevated);
    assert_eq!(with(7_200.0).level, PressureLevel::Ok);
    assert_eq!(with(f64::NAN).level, PressureLevel::Ok, "a non-number is no evidence");
}

#[test]
fn every_fired_rule_is_named_most_severe_first() {
    let verdict = judge(PressureInput {
        used_bytes: 9_000,
        free_bytes: 400,
        retries_in_window: Some(2),
        ooms_in_window: Some(1),
        ..calm()
    });
    assert_eq!(verdict.level, PressureLevel::Critical);
    assert_eq!(
        verdict.reasons,
        vec![
            reason::OOM_IN_WINDOW,
            reason::RETRIES_IN_WINDOW,
            reason::FREE_BELOW_HIGH,
            reason::USED_ABOVE_ELEVATED
        ]
    );
}

#[test]
fn unknown_total_answers_only_the_other_rules() {
    let input = PressureInput { total_bytes: 0, used_bytes: 0, free_bytes: 0, ..calm() };
    let verdict = judge(input);
    assert_eq!(verdict.level, PressureLevel::Ok);
    let verdict = judge(PressureInput { retries_in_window: Some(1), ..input });
    assert_eq!(verdict.level, PressureLevel::High);
}

#[test]
fn thresholds_are_honoured_when_changed() {
    let strict = PressureThresholds { elevated_used_ratio: 0.4, ..PressureThresholds::default() };
    assert_eq!(pressure(&calm(), &strict).level, PressureLevel::Elevated);
}

#[test]
fn levels_have_stable_numbers_and_names() {
    let levels =
        [PressureLevel::Ok, PressureLevel::Elevated, PressureLevel::High, PressureLevel::Critical];
    let numbers: Vec<u8> = levels.iter().map(|level| level.as_u8()).collect();
    assert_eq!(numbers, vec![0, 1, 2, 3]);
    let names: Vec<&str> = levels.iter().map(|level| level.as_str()).collect();
    assert_eq!(names, vec!["ok", "elevated", "high", "critical"]);
}
