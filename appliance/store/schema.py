"""The DuckDB schema, as an ordered list of migrations.

A database records the highest migration applied in `schema_version`; opening
it applies the missing ones in order. Never edit a published migration: add
a new one.
"""

from __future__ import annotations

MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "runs, models, episodes, messages, judgments, scores",
        """
        CREATE TABLE runs (
            run_id VARCHAR PRIMARY KEY,
            started_at TIMESTAMP NOT NULL,
            finished_at TIMESTAMP,
            status VARCHAR NOT NULL,
            seed BIGINT NOT NULL,
            config JSON NOT NULL,
            versions JSON NOT NULL,
            git_revision VARCHAR,
            file_hashes JSON NOT NULL,
            wall_s DOUBLE
        );
        CREATE TABLE models (
            run_id VARCHAR NOT NULL,
            name VARCHAR NOT NULL,
            backend VARCHAR NOT NULL,
            path VARCHAR NOT NULL,
            sha256 VARCHAR NOT NULL,
            parameters JSON NOT NULL,
            PRIMARY KEY (run_id, name)
        );
        CREATE TABLE episodes (
            episode_id VARCHAR PRIMARY KEY,
            run_id VARCHAR NOT NULL,
            scenario VARCHAR NOT NULL,
            instance_id VARCHAR NOT NULL,
            player VARCHAR NOT NULL,
            status VARCHAR NOT NULL,
            seed BIGINT NOT NULL,
            started_at TIMESTAMP NOT NULL,
            finished_at TIMESTAMP NOT NULL,
            wall_s DOUBLE NOT NULL,
            error VARCHAR,
            metadata JSON NOT NULL
        );
        CREATE TABLE messages (
            episode_id VARCHAR NOT NULL,
            idx INTEGER NOT NULL,
            speaker VARCHAR NOT NULL,
            model VARCHAR NOT NULL,
            text VARCHAR NOT NULL,
            prompt_tokens INTEGER NOT NULL,
            cached_prompt_tokens INTEGER NOT NULL,
            completion_tokens INTEGER NOT NULL,
            latency_s DOUBLE NOT NULL,
            finish_reason VARCHAR NOT NULL,
            PRIMARY KEY (episode_id, idx)
        );
        CREATE TABLE judgments (
            episode_id VARCHAR NOT NULL,
            panel VARCHAR NOT NULL,
            judge VARCHAR NOT NULL,
            mode VARCHAR NOT NULL,
            target_idx INTEGER NOT NULL,
            criterion VARCHAR NOT NULL,
            score DOUBLE,
            raw_text VARCHAR NOT NULL,
            parsed BOOLEAN NOT NULL,
            order_swapped BOOLEAN NOT NULL DEFAULT FALSE
        );
        CREATE TABLE scores (
            episode_id VARCHAR NOT NULL,
            run_id VARCHAR NOT NULL,
            panel VARCHAR NOT NULL,
            player VARCHAR NOT NULL,
            metric VARCHAR NOT NULL,
            value DOUBLE,
            calibrated_value DOUBLE,
            PRIMARY KEY (episode_id, panel, metric)
        );
        """,
    ),
    (
        2,
        "bench results",
        """
        CREATE TABLE bench (
            bench_id VARCHAR PRIMARY KEY,
            started_at TIMESTAMP NOT NULL,
            quick BOOLEAN NOT NULL,
            machine JSON NOT NULL,
            versions JSON NOT NULL,
            results JSON NOT NULL
        );
        """,
    ),
    (
        3,
        "human labels, judge verdicts on labelled items, calibrations",
        """
        ALTER TABLE judgments ADD COLUMN template VARCHAR DEFAULT '';
        ALTER TABLE scores ADD COLUMN calibration_id VARCHAR;
        CREATE TABLE label_sets (
            label_set VARCHAR PRIMARY KEY,
            kind VARCHAR NOT NULL,
            format VARCHAR NOT NULL,
            source VARCHAR NOT NULL,
            source_sha256 VARCHAR NOT NULL,
            imported_at TIMESTAMP NOT NULL,
            scales JSON NOT NULL
        );
        CREATE TABLE label_items (
            label_set VARCHAR NOT NULL,
            item_id VARCHAR NOT NULL,
            texts JSON NOT NULL,
            metadata JSON NOT NULL,
            PRIMARY KEY (label_set, item_id)
        );
        CREATE TABLE human_labels (
            label_set VARCHAR NOT NULL,
            item_id VARCHAR NOT NULL,
            annotator VARCHAR NOT NULL,
            criterion VARCHAR NOT NULL,
            value DOUBLE,
            raw_value VARCHAR NOT NULL
        );
        CREATE TABLE label_judgments (
            label_set VARCHAR NOT NULL,
            item_id VARCHAR NOT NULL,
            judge VARCHAR NOT NULL,
            template VARCHAR NOT NULL,
            template_fingerprint VARCHAR NOT NULL,
            variant VARCHAR NOT NULL,
            order_swapped BOOLEAN NOT NULL,
            score DOUBLE,
            raw_text VARCHAR NOT NULL,
            parsed BOOLEAN NOT NULL,
            created_at TIMESTAMP NOT NULL,
            PRIMARY KEY (label_set, item_id, judge, template_fingerprint, variant, order_swapped)
        );
        CREATE TABLE calibrations (
            calibration_id VARCHAR PRIMARY KEY,
            created_at TIMESTAMP NOT NULL,
            panel VARCHAR NOT NULL,
            judges JSON NOT NULL,
            label_set VARCHAR NOT NULL,
            criterion VARCHAR NOT NULL,
            template VARCHAR NOT NULL,
            seed BIGINT NOT NULL,
            fit_items JSON NOT NULL,
            heldout_items JSON NOT NULL,
            model JSON NOT NULL,
            metrics JSON NOT NULL
        );
        """,
    ),
]

MIGRATIONS.append(
    (
        4,
        "instance sets of generated or imported scenario instances",
        """
        CREATE TABLE instance_sets (
            name VARCHAR PRIMARY KEY,
            family VARCHAR NOT NULL,
            source VARCHAR NOT NULL,
            seed BIGINT,
            created_at TIMESTAMP NOT NULL,
            instance_count INTEGER NOT NULL,
            payload JSON NOT NULL
        );
        """,
    )
)

MIGRATIONS.append(
    (
        5,
        "scores keyed by player too: one episode can score several models (DeepEval's seats)",
        """
        CREATE TABLE scores_by_player (
            episode_id VARCHAR NOT NULL,
            run_id VARCHAR NOT NULL,
            panel VARCHAR NOT NULL,
            player VARCHAR NOT NULL,
            metric VARCHAR NOT NULL,
            value DOUBLE,
            calibrated_value DOUBLE,
            calibration_id VARCHAR,
            PRIMARY KEY (episode_id, panel, player, metric)
        );
        INSERT INTO scores_by_player
            SELECT episode_id, run_id, panel, player, metric, value, calibrated_value, calibration_id FROM scores;
        DROP TABLE scores;
        ALTER TABLE scores_by_player RENAME TO scores;
        """,
    )
)

MIGRATIONS.append(
    (
        6,
        "the models of an episode's pairing as data: player_model and partner_model beside the label",
        """
        ALTER TABLE episodes ADD COLUMN player_model VARCHAR;
        ALTER TABLE episodes ADD COLUMN partner_model VARCHAR;
        UPDATE episodes SET
            player_model = split_part(player, '--', 1),
            partner_model = CASE WHEN contains(player, '--') THEN split_part(player, '--', 2)
                                 ELSE player END;
        """,
    )
)

MIGRATIONS.append(
    (
        7,
        "episodes a run has planned, so other processes can show a live run's progress",
        """
        ALTER TABLE runs ADD COLUMN planned_episodes INTEGER;
        """,
    )
)

MIGRATIONS.append(
    (
        8,
        "the features of probability-reading judges, stored with their verdicts on labelled items",
        """
        ALTER TABLE label_judgments ADD COLUMN features JSON;
        """,
    )
)

LATEST_VERSION = MIGRATIONS[-1][0]
