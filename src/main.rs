fn main() -> std::process::ExitCode {
    gpuplan::cli::main()
}
