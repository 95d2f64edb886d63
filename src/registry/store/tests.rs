use super::*;

fn id(text: &str) -> BundleIdentity {
    BundleIdentity::recorded(text)
}

fn content(text: &str) -> ContentDigest {
    ContentDigest::recorded(text)
}

fn source() -> tempfile::TempDir {
    let source = tempfile::tempdir().unwrap();
    std::fs::create_dir(source.path().join("tools")).unwrap();
    std::fs::write(source.path().join("tools/x.py"), "print(1)").unwrap();
    std::fs::write(source.path().join("bundle.yaml"), "name: x").unwrap();
    std::fs::create_dir(source.path().join("__pycache__")).unwrap();
    source
}

#[test]
fn a_copy_keeps_its_content_while_the_source_changes() {
    let state = tempfile::tempdir().unwrap();
    let source = source();
    let store = BundleStore::new(state.path());
    let kept = store
        .keep(source.path(), &id("abcd"), &content("c1"))
        .unwrap();
    assert!(kept.made);
    let copy = kept.path;
    std::fs::write(source.path().join("tools/x.py"), "print(2)").unwrap();
    assert_eq!(
        std::fs::read_to_string(copy.join("tools/x.py")).unwrap(),
        "print(1)"
    );
    assert!(!copy.join("__pycache__").exists());
    // Kept again: the existing copy, untouched.
    let again = store
        .keep(source.path(), &id("abcd"), &content("c1"))
        .unwrap();
    assert_eq!((again.path.as_path(), again.made), (copy.as_path(), false));
    assert_eq!(
        std::fs::read_to_string(copy.join("tools/x.py")).unwrap(),
        "print(1)"
    );
    let found = store.find(&id("abcd")).unwrap();
    assert_eq!(
        found,
        Some(Copy {
            path: copy.clone(),
            content: content("c1"),
            sealed: true,
        })
    );
    assert_eq!(store.find(&id("../etc")).unwrap(), None);
    assert_eq!(store.find(&id("ffff")).unwrap(), None);
    // A file a tool writes into its working directory is not the copy's.
    std::fs::write(copy.join("scratch.txt"), "tool output").unwrap();
    assert!(store.find(&id("abcd")).unwrap().is_some());
    // Nothing is left in staging.
    let names: Vec<String> = std::fs::read_dir(state.path().join("bundles"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["abcd"]);
}

#[test]
fn a_damaged_copy_is_found_out_and_rebuilt_from_its_source() {
    let state = tempfile::tempdir().unwrap();
    let source = source();
    let store = BundleStore::new(state.path());
    let copy = store
        .keep(source.path(), &id("ab"), &content("c1"))
        .unwrap()
        .path;
    // Emptied, as a power cut leaves a file whose data never reached the disk.
    std::fs::write(copy.join("bundle.yaml"), "").unwrap();
    let error = store.find(&id("ab")).unwrap_err().to_string();
    assert!(
        error.contains(&copy.display().to_string())
            && error.contains("bundle.yaml: 0 bytes, 7 when copied")
            && error.contains("identity ab, content c1")
            && error.contains("resubmit"),
        "{error}"
    );
    let kept = store
        .keep(source.path(), &id("ab"), &content("c1"))
        .unwrap();
    assert!(kept.made, "rebuilt");
    assert_eq!(
        std::fs::read_to_string(copy.join("bundle.yaml")).unwrap(),
        "name: x"
    );
    assert!(store.find(&id("ab")).unwrap().is_some());
    // Other bytes of the same size, a missing file, a lost manifest.
    std::fs::write(copy.join("bundle.yaml"), "name: y").unwrap();
    assert!(store.find(&id("ab")).is_err());
    assert!(
        store
            .keep(source.path(), &id("ab"), &content("c1"))
            .unwrap()
            .made
    );
    std::fs::remove_file(copy.join("tools/x.py")).unwrap();
    assert!(
        store
            .find(&id("ab"))
            .unwrap_err()
            .to_string()
            .contains("tools/x.py")
    );
    assert!(
        store
            .keep(source.path(), &id("ab"), &content("c1"))
            .unwrap()
            .made
    );
    std::fs::remove_file(copy.join(".manifest.json")).unwrap();
    assert!(
        store
            .find(&id("ab"))
            .unwrap_err()
            .to_string()
            .contains("manifest")
    );
    // A copy recording other content than asked for is made again.
    assert!(
        store
            .keep(source.path(), &id("ab"), &content("c1"))
            .unwrap()
            .made
    );
    assert!(
        store
            .keep(source.path(), &id("ab"), &content("c2"))
            .unwrap()
            .made
    );
    assert_eq!(
        store.find(&id("ab")).unwrap().unwrap().content,
        content("c2")
    );
}

#[test]
fn pruning_keeps_copies_in_use_or_recently_used() {
    let state = tempfile::tempdir().unwrap();
    let source = tempfile::tempdir().unwrap();
    let store = BundleStore::new(state.path());
    store.keep(source.path(), &id("aa"), &content("c")).unwrap();
    store.keep(source.path(), &id("bb"), &content("c")).unwrap();
    // Staging a crash left behind.
    std::fs::create_dir(state.path().join("bundles/.cc.1.0.tmp")).unwrap();
    store.prune(&HashSet::new(), Duration::from_secs(3600));
    assert!(store.find(&id("aa")).unwrap().is_some() && store.find(&id("bb")).unwrap().is_some());
    store.prune(&HashSet::from([id("aa")]), Duration::ZERO);
    assert!(store.find(&id("aa")).unwrap().is_some());
    assert!(store.find(&id("bb")).unwrap().is_none());
    assert!(!state.path().join("bundles/.cc.1.0.tmp").exists());
}

#[test]
fn a_copy_made_before_manifests_is_found_unsealed_then_sealed() {
    let state = tempfile::tempdir().unwrap();
    let source = source();
    let store = BundleStore::new(state.path());
    let copy = store
        .keep(source.path(), &id("ab"), &content("c1"))
        .unwrap()
        .path;
    std::fs::remove_file(copy.join(".manifest.json")).unwrap();
    std::fs::write(copy.join(".content-digest"), "c1").unwrap();
    let found = store.find(&id("ab")).unwrap().unwrap();
    assert_eq!((found.sealed, &found.content), (false, &content("c1")));
    store.seal(&found).unwrap();
    let found = store.find(&id("ab")).unwrap().unwrap();
    assert!(found.sealed);
    // Sealed, it is verified like any copy.
    std::fs::write(copy.join("tools/x.py"), "").unwrap();
    assert!(store.find(&id("ab")).is_err());
}
