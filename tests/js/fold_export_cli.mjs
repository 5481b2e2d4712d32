// The browser fold's exports of given runs, for the Python tests that compare both folds
// on traces that are not committed (generated programs, bad input):
//
//   node tests/js/fold_export_cli.mjs RUNS.json
//
// RUNS.json is `[{"events": [...], "stops": [seq, ...]}, ...]`; prints one JSON array with
// the export of each run, in the shape of tests/golden/export_fold.py (golden_export.mjs).
import { readFileSync } from "node:fs";

import { exportRun } from "./golden_export.mjs";

const runs = JSON.parse(readFileSync(process.argv[2], "utf8"));
process.stdout.write(JSON.stringify(runs.map((run) => exportRun(run.events, run.stops))));
