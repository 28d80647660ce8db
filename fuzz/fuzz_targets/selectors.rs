//! Fuzzes placement selectors: any selector is evaluated or rejected with an error, the
//! verdict does not depend on the order of `matchExpressions`, and validity does not depend
//! on the labels. A panic or a failed assertion is a finding.
#![no_main]

use std::collections::BTreeMap;

use flotilla_api::federated::{LabelSelector, LabelSelectorRequirement};
use flotilla_api::selector::matches_selector;
use libfuzzer_sys::fuzz_target;

type Input = (
    Vec<(String, u8, Vec<String>)>,
    BTreeMap<String, String>,
    BTreeMap<String, String>,
);

fuzz_target!(|input: Input| {
    let (exprs, match_labels, labels) = input;
    // Mostly real operators, so that evaluation is reached and not only validation.
    let match_expressions: Vec<LabelSelectorRequirement> = exprs
        .into_iter()
        .map(|(key, op, values)| {
            let operator = match op % 5 {
                0 => "In".to_owned(),
                1 => "NotIn".to_owned(),
                2 => "Exists".to_owned(),
                3 => "DoesNotExist".to_owned(),
                _ => key.chars().rev().collect(),
            };
            LabelSelectorRequirement {
                key,
                operator,
                values,
            }
        })
        .collect();
    let selector = LabelSelector {
        match_labels,
        match_expressions,
    };
    let verdict = matches_selector(&selector, &labels);
    let mut reversed = selector.clone();
    reversed.match_expressions.reverse();
    let again = matches_selector(&reversed, &labels);
    assert_eq!(verdict.is_ok(), again.is_ok());
    if let (Ok(a), Ok(b)) = (&verdict, &again) {
        assert_eq!(a, b, "the order of matchExpressions changed the verdict");
    }
    let empty = BTreeMap::new();
    assert_eq!(verdict.is_ok(), matches_selector(&selector, &empty).is_ok());
});
