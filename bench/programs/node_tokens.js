// node workload: a JavaScript heap of strings and arrays, held and revisited.
//
// Reads the .py files under ROOT (the Python standard library: plenty of real
// text on any machine with python3) in a fixed order, again and again until
// SOURCE_MB megabytes have been read, and holds each file as an array of lines
// and each line as an array of tokens. Then visits lines in an order drawn
// from SEED and prints a digest of their tokens.
//
// Usage: node node_tokens.js ROOT SOURCE_MB SEED
'use strict';
const fs = require('fs');
const path = require('path');

function sources(root) {
  const out = [];
  const walk = (dir) => {
    for (const name of fs.readdirSync(dir).sort()) {
      if (name === 'site-packages' || name === 'dist-packages') continue;
      const full = path.join(dir, name);
      const st = fs.lstatSync(full);
      if (st.isDirectory()) walk(full);
      else if (st.isFile() && name.endsWith('.py')) out.push(full);
    }
  };
  walk(root);
  return out;
}

// mulberry32: a small seeded generator, so the order is the same in every run.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function main() {
  const [root, mb, seedArg] = process.argv.slice(2);
  const target = Number(mb) * 1e6;
  const files = sources(root);
  const lines = []; // every line of every copy
  const tokens = []; // tokens[i]: the tokens of lines[i]
  let read = 0;
  while (read < target) {
    for (const file of files) {
      // A fresh read per pass: new strings, not the previous pass's.
      const text = fs.readFileSync(file, 'latin1');
      for (const line of text.split('\n')) {
        lines.push(line);
        tokens.push(line.match(/\w+|[^\s\w]/g) || []);
      }
      read += text.length;
      if (read >= target) break;
    }
  }
  const next = rng(Number(seedArg));
  let h = 0x811c9dc5; // FNV-1a over the visited tokens
  let visited = 0;
  for (let n = 0; n < lines.length; n++) {
    const i = Math.floor(next() * lines.length);
    for (const tok of tokens[i]) {
      for (let c = 0; c < tok.length; c++) {
        h = Math.imul(h ^ tok.charCodeAt(c), 0x01000193) >>> 0;
      }
      visited++;
    }
    h = Math.imul(h ^ lines[i].length, 0x01000193) >>> 0;
  }
  console.log(`lines ${lines.length} source_bytes ${read} tokens_visited ${visited}`);
  console.log(`digest ${h.toString(16).padStart(8, '0')}`);
}

main();
