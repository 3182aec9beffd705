import ExporterCLI

ExporterCommandLine.main()
