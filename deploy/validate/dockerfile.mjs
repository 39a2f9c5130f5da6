// Lints Dockerfiles offline with dockerfile-utils (the validator behind the
// Docker language server): unknown instructions, bad flags, malformed
// arguments, stages that do not exist, and the like.
//
//   node dockerfile.mjs FILE...
//
// Errors fail; warnings are printed. Exits 1 on any error.
import { readFileSync } from "node:fs";
import { validate } from "dockerfile-utils";

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error("usage: node dockerfile.mjs FILE...");
  process.exit(2);
}
let errors = 0;
let warnings = 0;
for (const file of files) {
  const diagnostics = validate(readFileSync(file, "utf8"), {});
  for (const d of diagnostics) {
    // LSP severities: 1 error, 2 warning, 3 information, 4 hint.
    const kind = d.severity === 1 ? "error" : d.severity === 2 ? "warning" : "note";
    if (d.severity === 1) errors++;
    else if (d.severity === 2) warnings++;
    console.log(`${file}:${d.range.start.line + 1}:${d.range.start.character + 1}: ${kind}: ${d.message}`);
  }
  console.log(`${file}: ${diagnostics.length === 0 ? "ok" : `${diagnostics.length} diagnostic(s)`}`);
}
console.log(`dockerfile: ${errors} error(s), ${warnings} warning(s)`);
process.exit(errors > 0 ? 1 : 0);
