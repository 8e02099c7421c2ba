// Dumps Apache Kafka's own config definitions, one line per config, sorted by
// name, tab-separated. Single-file program for the Java 11+ source launcher:
//
//   java -cp 'tests/.deps/kafka/libs/*' tests/support/kafka/ConfigDefs.java SCOPE [--internal]
//
// SCOPE:
//   topic     name TYPE default IMPORTANCE validator doc   (LogConfig.configDefCopy())
//   broker    name TYPE default IMPORTANCE validator doc   (kafka.server.KafkaConfig.configDef(),
//             looked up by reflection: it is Scala code in kafka_2.13)
//   synonyms  topicName brokerName1,brokerName2,...  in Kafka's order, most
//             specific first (ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS)
//
// default is ConfigDef.convertToString(default, type), i.e. the string
// DescribeConfigs shows; "<none>" when the key has no default
// (ConfigDef.NO_DEFAULT_VALUE), "<null>" when the default is null or the key
// is a PASSWORD. doc (and default) escape backslash, tab, newline and carriage
// return as \\ \t \n \r. validator is the key's Validator.toString() (Kafka's
// "[0,...]" for a range, "[a, b]" for a set of strings), empty without one. Output is UTF-8 whatever the locale. Internal keys
// (ConfigDef.defineInternal; DescribeConfigs does not list them) are left out
// unless --internal is given.
// Used by config-defs.sh to write config/kafka-config-defs.tsv.

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.server.config.ConfigSynonym;
import org.apache.kafka.server.config.ServerTopicConfigSynonyms;
import org.apache.kafka.storage.internals.log.LogConfig;

public class ConfigDefs {
    public static void main(String[] args) throws Exception {
        if (args.length < 1 || args.length > 2 || (args.length == 2 && !args[1].equals("--internal"))) {
            System.err.println("usage: ConfigDefs topic|broker|synonyms [--internal]");
            System.exit(2);
        }
        boolean internal = args.length == 2;
        StringBuilder out = new StringBuilder();
        switch (args[0]) {
            case "topic":
                dump(LogConfig.configDefCopy(), internal, out);
                break;
            case "broker":
                ConfigDef def = (ConfigDef) Class.forName("kafka.server.KafkaConfig")
                        .getMethod("configDef").invoke(null);
                dump(def, internal, out);
                break;
            case "synonyms":
                Map<String, List<ConfigSynonym>> syn =
                        new TreeMap<>(ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS);
                for (Map.Entry<String, List<ConfigSynonym>> e : syn.entrySet()) {
                    out.append(e.getKey()).append('\t');
                    List<ConfigSynonym> l = e.getValue();
                    for (int i = 0; i < l.size(); i++) {
                        if (i > 0) out.append(',');
                        out.append(l.get(i).name());
                    }
                    out.append('\n');
                }
                break;
            default:
                System.err.println("ConfigDefs: unknown scope " + args[0]);
                System.exit(2);
        }
        // UTF-8 whatever the locale (some docs hold non-ASCII, e.g. a right quote).
        PrintStream ps = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        ps.print(out);
        ps.flush();
        if (ps.checkError()) System.exit(1);
    }

    static void dump(ConfigDef def, boolean internal, StringBuilder out) {
        for (ConfigDef.ConfigKey k : new TreeMap<>(def.configKeys()).values()) {
            if (k.internalConfig && !internal) continue;
            String dflt;
            if (!k.hasDefault()) dflt = "<none>";
            else if (k.defaultValue == null || k.type == ConfigDef.Type.PASSWORD) dflt = "<null>";
            else dflt = esc(ConfigDef.convertToString(k.defaultValue, k.type));
            out.append(k.name).append('\t')
               .append(k.type.name()).append('\t')
               .append(dflt).append('\t')
               .append(k.importance == null ? "<null>" : k.importance.name()).append('\t')
               .append(k.validator == null ? "" : esc(k.validator.toString())).append('\t')
               .append(k.documentation == null ? "" : esc(k.documentation)).append('\n');
        }
    }

    static String esc(String s) {
        StringBuilder b = new StringBuilder(s.length());
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '\\': b.append("\\\\"); break;
                case '\t': b.append("\\t"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                default: b.append(c);
            }
        }
        return b.toString();
    }
}
