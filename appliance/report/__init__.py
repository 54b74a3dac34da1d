"""Reports computed from the store: leaderboards with bootstrap intervals."""

from appliance.report.leaderboard import Leaderboard, LeaderboardRow, build_leaderboard

__all__ = ["Leaderboard", "LeaderboardRow", "build_leaderboard"]
