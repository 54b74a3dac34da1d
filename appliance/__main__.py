from appliance.cli.main import main

main()
