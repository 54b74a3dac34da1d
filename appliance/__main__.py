"""`python -m appliance`: the hub libraries are told to stay offline before anything else loads."""

from appliance.offline import enforce_offline

enforce_offline()

from appliance.cli.main import main  # noqa: E402

main()
