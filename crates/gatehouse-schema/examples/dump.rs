fn main() {
    let paths: Vec<std::path::PathBuf> = std::env::args().skip(1).map(Into::into).collect();
    match gatehouse_schema::load_paths(&paths) {
        Ok(m) => println!("{}", serde_json::to_string_pretty(&m).unwrap_or_default()),
        Err(d) => print!("{d}"),
    }
}
