from edgebuild.cli.commands import main

main()
