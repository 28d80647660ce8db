//! Compiled rules shared by every caller: one compile per target type and distinct rule
//! set, so an FTC's rules are compiled once per generation that changes them, however
//! many sync controllers, status writers and previews read them.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
};

use super::TypeHealth;
use flotilla_api::core::ApiResource;
use flotilla_api::health::HealthRules;

/// Rule sets kept before the cache starts over (old generations' rules are not needed).
const MAX_ENTRIES: usize = 512;

type Key = (ApiResource, Option<HealthRules>);

pub(super) fn compiled(target: &ApiResource, rules: Option<&HealthRules>) -> Arc<TypeHealth> {
    static CACHE: OnceLock<Mutex<HashMap<Key, Arc<TypeHealth>>>> = OnceLock::new();
    let key = (target.clone(), rules.cloned());
    let cache = CACHE.get_or_init(Mutex::default);
    if let Some(found) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return found.clone();
    }
    // Compiled outside the lock: a slow compile does not hold up other types.
    let health = Arc::new(TypeHealth::compile(target, rules));
    let mut map = cache.lock().unwrap_or_else(|e| e.into_inner());
    if map.len() >= MAX_ENTRIES {
        map.clear();
    }
    map.entry(key).or_insert(health).clone()
}
