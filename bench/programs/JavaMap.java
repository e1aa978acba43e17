// JVM workload: a HashMap<String, String> of N entries, held and revisited.
//
// Values are text of words drawn from a seeded java.util.Random (its sequence
// is specified, so every JVM draws the same), N lookups at random keys follow,
// then one pass in the map's own order; prints a CRC32 of what it read.
//
// Usage: java JavaMap N SEED
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.Random;
import java.util.zip.CRC32;

public class JavaMap {
    private static final String[] WORDS = {
        "memory", "page", "compress", "budget", "region", "fault", "evict", "pool",
        "kernel", "swap", "zram", "cgroup", "process", "thread", "signal", "buffer",
        "the", "a", "of", "and", "to", "in", "is", "for", "on", "with", "as", "by",
        "lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit",
    };

    public static void main(String[] args) {
        int n = Integer.parseInt(args[0]);
        long seed = Long.parseLong(args[1]);
        Random random = new Random(seed);
        Map<String, String> map = new HashMap<>();
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < n; i++) {
            sb.setLength(0);
            int words = 8 + random.nextInt(40);
            for (int w = 0; w < words; w++) {
                sb.append(WORDS[random.nextInt(WORDS.length)]).append(' ');
            }
            sb.append(i);
            map.put("key:" + i, sb.toString());
        }
        CRC32 crc = new CRC32();
        Random lookups = new Random(seed + 1);
        for (int i = 0; i < n; i++) {
            crc.update(map.get("key:" + lookups.nextInt(n)).getBytes(StandardCharsets.UTF_8));
        }
        long chars = 0;
        for (Map.Entry<String, String> e : map.entrySet()) {
            crc.update(e.getKey().getBytes(StandardCharsets.UTF_8));
            chars += e.getValue().length();
        }
        System.out.println("entries " + map.size() + " value_chars " + chars);
        System.out.printf("crc32 %08x%n", crc.getValue());
    }
}
