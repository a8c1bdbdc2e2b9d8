// Runs one named check: prints "ok   NAME[: detail]", or "FAIL NAME: why" and exits 1.
export async function check(name, body) {
  try {
    const detail = await body();
    console.log(`ok   ${name}${detail ? `: ${detail}` : ''}`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.message}`);
    process.exit(1);
  }
}
